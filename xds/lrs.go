package xds

import (
	"errors"
	"io"
	"time"

	v3endpointpb "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	v3lrsgrpc "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	v3lrspb "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spillway/spillway/load"
)

// load is what the load table needs of a node.
func (n nodeInfo) load() load.Node {
	return load.Node{Zone: n.zone, Label: n.label, Cluster: n.cluster}
}

// StreamLoadStats implements LRS: it asks the client to report every
// cluster every LRSInterval and records the reports. The stream holds its
// client zone's slot in the zone set until it ends; its samples go with it.
func (s *Server) StreamLoadStats(stream v3lrsgrpc.LoadReportingService_StreamLoadStatsServer) error {
	id := s.loads.NewStream()
	var node nodeInfo
	known := false
	defer func() {
		s.loads.Forget(id)
		if known {
			s.zones.release(node.label, time.Now())
		}
	}()
	sentInterval := false
	allowed := false
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		// Every node a stream names is its caller's to claim: LRS streams
		// may resend the node, and its cluster labels the load.
		if !allowed || (req.GetNode() != nil && (!known || req.GetNode().GetCluster() != node.cluster)) {
			if err := s.authorize(stream.Context(), "lrs", req.GetNode().GetCluster()); err != nil {
				return err
			}
			allowed = true
		}
		now := time.Now()
		if req.GetNode() != nil {
			n := nodeOf(req.GetNode())
			if !known || n.zone != node.zone {
				if known {
					s.zones.release(node.label, now)
				}
				n.label = s.zones.acquire(n.zone, now)
				known = true
			} else {
				n.label = node.label
			}
			node = n
		}
		snap := s.store.Snapshot()
		from := node.label
		if !known {
			from = labelNone
		}
		kept := func(ul *v3endpointpb.UpstreamLocalityStats) {
			to := zoneLabel(ul.GetLocality().GetZone())
			s.metrics.lrsRequests.WithLabelValues(from, to, "succeeded").Add(float64(ul.GetTotalSuccessfulRequests()))
			s.metrics.lrsRequests.WithLabelValues(from, to, "errored").Add(float64(ul.GetTotalErrorRequests()))
		}
		for _, cs := range req.GetClusterStats() {
			s.metrics.lrsReports.Inc()
			reason, n := s.loads.Record(id, node.load(), cs, now, snap, kept)
			switch {
			case n > 0:
				s.metrics.lrsDropped.WithLabelValues(reason).Add(float64(n))
			case reason != "":
				s.metrics.lrsDropped.WithLabelValues(reason).Inc()
			}
		}
		if !sentInterval {
			sentInterval = true
			if err := stream.Send(&v3lrspb.LoadStatsResponse{
				SendAllClusters:       true,
				LoadReportingInterval: durationpb.New(s.cfg.LRSInterval),
			}); err != nil {
				return err
			}
		}
	}
}

package xds_test

import (
	"context"
	"fmt"
	"testing"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	v3discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	v3lrsgrpc "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	v3lrspb "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/security/authz"
	"github.com/spillway/spillway/xds"
)

// ownCluster is a hand fake of a policy with "xds: own": the caller
// (here named by the "x-identity" metadata, as the authn interceptor
// would from its certificate) may be an xDS client of its own service
// only.
type ownCluster struct{}

func (ownCluster) Authorize(ctx context.Context, a authz.Action, resource string) error {
	id := "anonymous"
	if v := metadata.ValueFromIncomingContext(ctx, "x-identity"); len(v) == 1 {
		id = v[0]
	}
	if a == authz.XDS && id == resource {
		return nil
	}
	return fmt.Errorf("permission denied: %s may not %s %s", id, a, resource)
}

// TestStreamsAskTheAuthorizer: SotW, delta and LRS streams are allowed
// for exactly the node clusters the Authorizer allows; a denied stream
// ends with PermissionDenied and its message on the first request
// carrying the node, before any response, and is not counted.
func TestStreamsAskTheAuthorizer(t *testing.T) {
	srv := startRawXDS(t, rawStore(t, map[string]int{"payments": 1, "checkout": 1}), xds.Config{Authorizer: ownCluster{}})
	ads := v3discoverygrpc.NewAggregatedDiscoveryServiceClient(srv.conn)
	lrs := v3lrsgrpc.NewLoadReportingServiceClient(srv.conn)
	node := func(cluster string) *v3corepb.Node {
		return &v3corepb.Node{Id: cluster + "-1", Cluster: cluster, Locality: &v3corepb.Locality{Zone: "z1"}}
	}
	open := map[string]func(ctx context.Context, cluster string) error{
		"sotw": func(ctx context.Context, cluster string) error {
			s, err := ads.StreamAggregatedResources(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&v3discoverypb.DiscoveryRequest{Node: node(cluster), TypeUrl: eds, ResourceNames: []string{"payments"}}); err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
		"delta": func(ctx context.Context, cluster string) error {
			s, err := ads.DeltaAggregatedResources(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&v3discoverypb.DeltaDiscoveryRequest{Node: node(cluster), TypeUrl: eds, ResourceNamesSubscribe: []string{"payments"}}); err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
		"lrs": func(ctx context.Context, cluster string) error {
			s, err := lrs.StreamLoadStats(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&v3lrspb.LoadStatsRequest{Node: node(cluster)}); err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		},
	}
	for _, proto := range []string{"sotw", "delta", "lrs"} {
		for _, tc := range []struct {
			name, identity, cluster string
			wantMsg                 string // "" allowed
		}{
			{"own_cluster", "payments", "payments", ""},
			{"other_cluster", "payments", "checkout", "permission denied: payments may not xds checkout"},
			{"anonymous", "", "payments", "permission denied: anonymous may not xds payments"},
		} {
			t.Run(proto+"/"+tc.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), rawRecvTimeout)
				defer cancel()
				if tc.identity != "" {
					ctx = metadata.AppendToOutgoingContext(ctx, "x-identity", tc.identity)
				}
				before := srv.metric(t, "spillway_xds_streams")
				err := open[proto](ctx, tc.cluster)
				if tc.wantMsg == "" {
					if err != nil {
						t.Fatalf("%s stream as %s for %s = %v, want a response", proto, tc.identity, tc.cluster, err)
					}
					cancel()
					waitFor(t, "the allowed stream's end counted", func() bool { return srv.metric(t, "spillway_xds_streams") == 0 })
					return
				}
				st := status.Convert(err)
				if st.Code() != codes.PermissionDenied || st.Message() != tc.wantMsg {
					t.Errorf("%s stream as %q for %s = %v %q, want PermissionDenied %q", proto, tc.identity, tc.cluster, st.Code(), st.Message(), tc.wantMsg)
				}
				if got := srv.metric(t, "spillway_xds_streams"); got != before {
					t.Errorf("spillway_xds_streams = %v after a denied stream, want %v", got, before)
				}
			})
		}
	}
}

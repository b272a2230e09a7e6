package xds

import (
	"context"
	"errors"
	"io"

	v3corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/spillway/spillway/registry"
)

// The receive side both ADS protocols share. State of the world (sotw.go)
// and delta (delta.go) differ in what a request asks and what a response
// holds; how a stream starts, reads its requests, admits its caller and
// node, and ends is the same, and is here.

// The protocol labels of ADS streams, in metrics and logs.
const (
	protocolSotW  = "sotw"
	protocolDelta = "delta"
)

// adsRequest is what the shared receive side reads of a request:
// *v3discoverypb.DiscoveryRequest and *v3discoverypb.DeltaDiscoveryRequest
// implement it.
type adsRequest interface {
	GetNode() *v3corepb.Node
	GetTypeUrl() string
}

// adsServerStream is the server side of an ADS stream of requests Req, as
// the generated AggregatedDiscoveryService servers give it.
type adsServerStream[Req adsRequest] interface {
	Context() context.Context
	Recv() (Req, error)
}

// adsStream is the state every ADS stream keeps besides its
// subscriptions: the push machinery, and who the caller is. Like the rest
// of a stream's state it is touched only under streamCore.mu.
type adsStream struct {
	streamCore
	node  nodeInfo
	known bool // node seen: the stream is counted and holds a zone slot
	// allowed: the Authorizer allowed the stream (for its node once the
	// node is known).
	allowed bool
}

// serveADS is the gRPC handler of an ADS stream of either protocol: the
// stream's pushes are push, run on the fan-out; its requests are read on
// the calling goroutine and each is answered by handle, under the stream
// lock, in order. It returns nil when the client ends the stream (io.EOF)
// or the stream's context ends, and otherwise the first error of Recv,
// handle or a push. The stream stops being pushed to, and gives up its
// count and zone slot, before serveADS returns.
func serveADS[Req adsRequest](s *Server, a *adsStream, protocol string, stream adsServerStream[Req], push func() error, handle func(Req) error) error {
	a.w = newWatcher(a.wake)
	a.fan = s.fan
	a.streamCore.push = push
	defer a.close(s, protocol)
	ctx := stream.Context()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) || ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if err := a.streamCore.handle(func() error { return handle(req) }); err != nil {
			return err
		}
	}
}

// admit is how every request of either protocol starts; it returns the
// index of the request's resource type, or -1: with an error that ends the
// stream, or with none for a type this server does not serve, which the
// request handler ignores (admit logs it). The first
// request, and the first that carries the node if earlier ones did not,
// ask the Authorizer whether the caller may be an xDS client of the node's
// cluster: a denial is the PermissionDenied status that ends the stream,
// before anything is sent, subscribed or counted. The node's first
// appearance counts the stream and takes its zone's slot; the node of a
// later request is not read again.
func (a *adsStream) admit(s *Server, ctx context.Context, protocol string, req adsRequest) (int, error) {
	node := req.GetNode()
	if !a.allowed || (!a.known && node != nil) {
		if err := s.authorize(ctx, protocol, node.GetCluster()); err != nil {
			return -1, err
		}
		a.allowed = true
	}
	if !a.known && node != nil {
		a.known = true
		a.node = nodeOf(node)
		s.streamOpened(protocol, &a.node)
	}
	t := typeIndex(req.GetTypeUrl())
	if t < 0 {
		s.log.Debug("request for an unknown type ignored", "type", req.GetTypeUrl(), "node", a.node.id)
	}
	return t, nil
}

// close ends the stream's pushes and undoes what admit counted.
func (a *adsStream) close(s *Server, protocol string) {
	a.stop(&s.hub)
	if a.known {
		s.streamClosed(protocol, a.node)
	}
}

// nodeOf is what a client's node says, its region kept only when it is
// one an endpoint can have.
func nodeOf(n *v3corepb.Node) nodeInfo {
	region := n.GetLocality().GetRegion()
	if registry.ValidateLabel("region", region) != nil {
		region = "" // not a region any endpoint has
	}
	return nodeInfo{id: n.GetId(), zone: n.GetLocality().GetZone(), region: region, cluster: n.GetCluster()}
}

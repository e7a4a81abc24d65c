package xds

import (
	"context"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// DefaultMaxResponseBytes is Config.MaxResponseBytes's default: gRPC's default limit of a
// received message, which a client that sets none (gRPC's own xDS client, Envoy's
// defaults) applies.
const DefaultMaxResponseBytes = 4 << 20

// splitCache keeps every state-of-the-world response of a type that need not carry its whole
// state in one response (EDS, RDS) under max bytes: a larger one is cut to the resources that
// fit, and the subscription is told only those were returned, so that the cache answers the
// client's acknowledgement at once with the rest, a response at a time. One resource larger
// than max goes alone (a client must accept it, or nothing could serve it).
type splitCache struct {
	cachev3.Cache
	max int
}

func (c splitCache) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, value chan cachev3.Response) (func(), error) {
	inner := make(chan cachev3.Response, 1)
	done := make(chan struct{})
	cancel, err := c.Cache.CreateWatch(req, sub, inner)
	if err != nil {
		return nil, err
	}
	go func() { // owned by the watch: it ends with the watch's one response, or its cancel
		select {
		case r := <-inner:
			value <- c.fit(r)
		case <-done:
		}
	}()
	stopped := false
	return func() {
		if !stopped {
			stopped = true
			close(done)
		}
		if cancel != nil {
			cancel()
		}
	}, nil
}

// fit returns r, or r cut to the resources that fit in max bytes.
func (c splitCache) fit(r cachev3.Response) cachev3.Response {
	out, err := r.GetDiscoveryResponse()
	if err != nil || proto.Size(out) <= c.max {
		return r
	}
	raw, ok := r.(interface {
		GetRawResources() []types.ResourceWithTTL
	})
	if !ok {
		return r
	}
	resources := raw.GetRawResources()
	if len(resources) != len(out.GetResources()) {
		return r
	}
	kept := make([]*anypb.Any, 0, len(out.GetResources()))
	returned := make(map[string]string, len(r.GetReturnedResources()))
	for k, v := range r.GetReturnedResources() {
		returned[k] = v
	}
	size := proto.Size(&discoveryv3.DiscoveryResponse{VersionInfo: out.GetVersionInfo(), TypeUrl: out.GetTypeUrl(), Nonce: "18446744073709551615"})
	for i, a := range out.GetResources() {
		n := proto.Size(a) + 8 // the field's tag and length
		if len(kept) == 0 || size+n <= c.max {
			kept = append(kept, a)
			size += n
			continue
		}
		delete(returned, cachev3.GetResourceName(resources[i].Resource)) // not sent: the client does not know it yet
	}
	return &cachev3.PassthroughResponse{Request: r.GetRequest(), ReturnedResources: returned,
		DiscoveryResponse: &discoveryv3.DiscoveryResponse{VersionInfo: out.GetVersionInfo(), TypeUrl: out.GetTypeUrl(), Resources: kept}}
}

func (c splitCache) Fetch(ctx context.Context, req *cachev3.Request) (cachev3.Response, error) {
	r, err := c.Cache.Fetch(ctx, req)
	if err != nil {
		return nil, err // as the cache said it: the REST server tells its errors apart
	}
	return c.fit(r), nil
}

package routing

import (
	"strings"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// Key is the routing key of a parsed path: parameter names erased, "{}" for a parameter and
// "{...}" for a wildcard, so "/v2/assets/{id}" and "/v2/assets/{assetId}" share a key (and
// a slot of the table). A path of literals only is its own key.
func Key(segs []apiv1.Segment) string {
	if len(segs) == 0 {
		return "/"
	}
	var b strings.Builder
	b.Grow(keySize(segs))
	writeKey(&b, segs)
	return b.String()
}

// routeKeys hands out the keys of a manifest's routes in order: the path itself for a route
// of literals only, else a slice of one string holding the keys of the others — one
// allocation per manifest, and none for a manifest of literal paths.
type routeKeys struct {
	all string
	at  int
}

func newRouteKeys(routes []apiv1.ManifestRoute, infos []apiv1.RouteInfo) routeKeys {
	n := 0
	for i := range infos {
		if strings.IndexByte(routes[i].Path, '{') >= 0 {
			n += keySize(infos[i].Segments)
		}
	}
	if n == 0 {
		return routeKeys{}
	}
	var b strings.Builder
	b.Grow(n)
	for i := range infos {
		if strings.IndexByte(routes[i].Path, '{') >= 0 {
			writeKey(&b, infos[i].Segments)
		}
	}
	return routeKeys{all: b.String()}
}

// next is the key of the next route, whose path and parsed segments are given.
func (k *routeKeys) next(path string, segs []apiv1.Segment) string {
	if strings.IndexByte(path, '{') < 0 {
		return path
	}
	size := keySize(segs)
	key := k.all[k.at : k.at+size]
	k.at += size
	return key
}

// keySize is the length of Key(segs) for segs not empty.
func keySize(segs []apiv1.Segment) int {
	n := 0
	for _, s := range segs {
		switch s.Kind {
		case apiv1.Literal:
			n += 1 + len(s.Value)
		case apiv1.Param:
			n += 3 // "/{}"
		case apiv1.Wildcard:
			n += 6 // "/{...}"
		}
	}
	return n
}

// writeKey writes Key(segs), for segs not empty, to b.
func writeKey(b *strings.Builder, segs []apiv1.Segment) {
	for _, s := range segs {
		b.WriteByte('/')
		switch s.Kind {
		case apiv1.Literal:
			b.WriteString(s.Value)
		case apiv1.Param:
			b.WriteString("{}")
		case apiv1.Wildcard:
			b.WriteString("{...}")
		}
	}
}

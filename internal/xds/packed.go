package xds

import (
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The assignments of the capabilities' clusters are sent already encoded. Each endpoint's
// locality is encoded once, when it changes, and kept as bytes; an assignment is its
// cluster's name with the encoded localities behind it, carried as the message's unknown
// fields, which a marshal writes as they are. On the wire it is the assignment loadAssignment
// builds, byte for byte (TestUpdatesByChangeAreTheWholeView compares the two encoded), so
// every client reads it as such. Under an evacuation's churn, marshalling the assignments
// again for each version was the largest part of the server's work, and their messages, a
// dozen objects per endpoint, were most of what the collector walked.
//
// In this process such an assignment has no Endpoints: read it from its encoding.

// part is one endpoint's locality, encoded, at its xDS priority.
type part struct {
	priority uint32
	raw      []byte
}

// endpointsField is the field number of ClusterLoadAssignment.endpoints.
var endpointsField = (&endpointv3.ClusterLoadAssignment{}).ProtoReflect().Descriptor().Fields().ByName("endpoints").Number()

// packedAssignment is the assignment of cluster name with endpoints eps (in sortEndpoints'
// order: capsIndex keeps its members so), and its parts, one per endpoint. It takes each
// endpoint's part from prevParts, the parts of the assignment built from prev (the same
// endpoints in the same order), when prev holds the endpoint at the same xDS priority: one
// walk pairs the two lists, and an endpoint equal to the next of prev, the usual case, is
// paired without ordering the two.
func packedAssignment(name string, eps, prev []endpoint, prevParts []part) (*endpointv3.ClusterLoadAssignment, []part, error) {
	if len(prev) != len(prevParts) {
		prev = nil
	}
	parts := make([]part, 0, len(eps))
	size := 0
	var prio uint32
	j := 0
	for i, ep := range eps {
		if i > 0 && (ep.priority != eps[i-1].priority || ep.rank != eps[i-1].rank) {
			prio++
		}
		for j < len(prev) && prev[j] != ep && compareEndpoints(prev[j], ep) < 0 {
			j++
		}
		if j < len(prev) && prev[j] == ep && prevParts[j].priority == prio {
			parts = append(parts, prevParts[j])
			size += protowire.SizeTag(endpointsField) + protowire.SizeBytes(len(prevParts[j].raw))
			j++
			continue
		}
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(localityOf(ep, prio))
		if err != nil {
			return nil, nil, err
		}
		parts = append(parts, part{priority: prio, raw: raw})
		size += protowire.SizeTag(endpointsField) + protowire.SizeBytes(len(raw))
	}
	b := make([]byte, 0, size)
	for _, p := range parts {
		b = protowire.AppendTag(b, endpointsField, protowire.BytesType)
		b = protowire.AppendBytes(b, p.raw)
	}
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
	cla.ProtoReflect().SetUnknown(protoreflect.RawFields(b))
	return cla, parts, nil
}

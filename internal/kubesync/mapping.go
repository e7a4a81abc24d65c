package kubesync

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// The annotations (and the one label) a Service carries for kube-sync.
const (
	// AnnotationCapabilities is required: a JSON list of capabilities as a registration
	// carries them. Without it the Service is not synced.
	AnnotationCapabilities = "meshflows.io/capabilities"
	// AnnotationPort names the port (its name or number) whose endpoints are instances;
	// default the slice's first.
	AnnotationPort = "meshflows.io/port"
	// AnnotationServiceName is the instances' service_name (default the Service's name).
	AnnotationServiceName = "meshflows.io/service-name"
	// AnnotationVersion is their service_version (default the Service's
	// app.kubernetes.io/version label).
	AnnotationVersion = "meshflows.io/version"
	// AnnotationManifest is the manifest (JSON) every instance registers with.
	AnnotationManifest = "meshflows.io/manifest"
	// AnnotationScheme is http (default) or https.
	AnnotationScheme = "meshflows.io/scheme"
	// AnnotationAddressType is the address family of the slices synced: IPv4 (default) or
	// IPv6 (a dual-stack Service has a slice of each; one family makes one instance a pod).
	AnnotationAddressType = "meshflows.io/address-type"
	// AnnotationTeam names the team that owns the Service's instances: it is told of their
	// defects (the registration's team; default kube-sync's own identity).
	AnnotationTeam = "meshflows.io/team"
	// LabelVersion is the Service label read for the version when the annotation is absent.
	LabelVersion = "app.kubernetes.io/version"
	// LabelServiceName is the label an EndpointSlice names its Service by.
	LabelServiceName = discoveryv1.LabelServiceName
)

// Spec is what a Service's annotations say, parsed and validated.
type Spec struct {
	ServiceName, ServiceVersion string
	Capabilities                []apiv1.Capability
	Manifest                    *apiv1.Manifest
	Port                        string // a name or a number; "" the first
	Scheme                      string
	AddressType                 discoveryv1.AddressType
	Team                        string
}

// Annotated reports whether svc asks to be synced.
func Annotated(svc *corev1.Service) bool {
	_, ok := svc.Annotations[AnnotationCapabilities]
	return ok
}

// ParseSpec reads svc's annotations; every problem is named in the error, together.
func ParseSpec(svc *corev1.Service) (Spec, error) {
	a := svc.Annotations
	s := Spec{ServiceName: svc.Name, ServiceVersion: svc.Labels[LabelVersion], Port: strings.TrimSpace(a[AnnotationPort]),
		Scheme: "http", AddressType: discoveryv1.AddressTypeIPv4, Team: strings.TrimSpace(a[AnnotationTeam])}
	var errs []error
	if v, ok := a[AnnotationServiceName]; ok {
		s.ServiceName = strings.TrimSpace(v)
	}
	if v, ok := a[AnnotationVersion]; ok {
		s.ServiceVersion = strings.TrimSpace(v)
	}
	if s.ServiceVersion == "" {
		errs = append(errs, fmt.Errorf("no version: set the annotation %s or the label %s", AnnotationVersion, LabelVersion))
	}
	if err := strictJSON(a[AnnotationCapabilities], &s.Capabilities); err != nil {
		errs = append(errs, fmt.Errorf("annotation %s: %w", AnnotationCapabilities, err))
	}
	if m, ok := a[AnnotationManifest]; ok {
		s.Manifest = &apiv1.Manifest{}
		// a manifest as a provider publishes it: fields this registry does not know are its
		// own to ignore, as a registration's are
		if err := json.Unmarshal([]byte(m), s.Manifest); err != nil {
			errs = append(errs, fmt.Errorf("annotation %s: %w", AnnotationManifest, err))
		}
	}
	switch v := strings.TrimSpace(a[AnnotationScheme]); v {
	case "", "http", "https":
		if v != "" {
			s.Scheme = v
		}
	default:
		errs = append(errs, fmt.Errorf("annotation %s: %q, want http or https", AnnotationScheme, v))
	}
	switch v := strings.TrimSpace(a[AnnotationAddressType]); v {
	case "", "IPv4":
	case "IPv6":
		s.AddressType = discoveryv1.AddressTypeIPv6
	default:
		errs = append(errs, fmt.Errorf("annotation %s: %q, want IPv4 or IPv6", AnnotationAddressType, v))
	}
	if len(errs) > 0 {
		return Spec{}, errors.Join(errs...)
	}
	if s.Manifest != nil {
		// one manifest for every instance: the service it names is the Service's, and each
		// instance's registration names itself (forManifest)
		if s.Manifest.Service.Name == "" {
			s.Manifest.Service.Name = s.ServiceName
		}
		if s.Manifest.Service.Version == "" {
			s.Manifest.Service.Version = s.ServiceVersion
		}
	}
	// the registration's own rules, on a request of the Service's shape
	probe := apiv1.RegisterRequest{InstanceID: "probe", ServiceName: s.ServiceName, ServiceVersion: s.ServiceVersion, Team: s.Team,
		Endpoint: s.Scheme + "://127.0.0.1:80", Capabilities: s.Capabilities, Manifest: forInstance(s.Manifest, "probe")}
	if err := probe.Validate(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// strictJSON decodes data into v refusing unknown fields and trailing data.
func strictJSON(data string, v any) error {
	dec := json.NewDecoder(strings.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON value")
	}
	return nil
}

// Endpoint is one instance a Service's slices give: its registration and its condition.
type Endpoint struct {
	Request apiv1.RegisterRequest
	// Ready is the endpoint's ready condition (unset counts as ready, as Kubernetes says);
	// Terminating that the pod is going.
	Ready, Terminating bool
}

// Endpoints returns the instances of svc (with spec) in slices: one per endpoint address on
// the spec's port, of the spec's address family, sorted by instance id. An id two endpoints
// share (a pod listed twice) is kept once, ready and not terminating winning.
func Endpoints(svc *corev1.Service, spec Spec, slices []*discoveryv1.EndpointSlice) []Endpoint {
	byID := map[string]Endpoint{}
	for _, sl := range slices {
		if sl.AddressType != spec.AddressType {
			continue
		}
		port, ok := pickPort(sl.Ports, spec.Port)
		if !ok {
			continue
		}
		for _, ep := range sl.Endpoints {
			for _, addr := range ep.Addresses {
				e := Endpoint{Ready: ep.Conditions.Ready == nil || *ep.Conditions.Ready,
					Terminating: ep.Conditions.Terminating != nil && *ep.Conditions.Terminating}
				e.Request = apiv1.RegisterRequest{InstanceID: instanceID(svc, ep.TargetRef, addr, len(ep.Addresses) > 1),
					ServiceName: spec.ServiceName, ServiceVersion: spec.ServiceVersion, Endpoint: spec.Scheme + "://" + net.JoinHostPort(addr, strconv.Itoa(int(port))),
					Capabilities: spec.Capabilities, Readiness: apiv1.ReadinessRuntime, Team: spec.Team}
				e.Request.Manifest = forInstance(spec.Manifest, e.Request.InstanceID)
				if ep.Zone != nil {
					e.Request.Zone = *ep.Zone
				}
				if old, dup := byID[e.Request.InstanceID]; dup && (old.Ready && !old.Terminating) {
					continue
				}
				byID[e.Request.InstanceID] = e
			}
		}
	}
	out := make([]Endpoint, 0, len(byID))
	for _, e := range byID {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Request.InstanceID < out[j].Request.InstanceID })
	return out
}

// health is what the registry is told of e: ok when ready, else not_ready.
func (e *Endpoint) health() string {
	if e.Ready {
		return apiv1.HealthOK
	}
	return apiv1.HealthNotReady
}

// pickPort returns the port named (by name or number) or, with want empty, the first.
func pickPort(ports []discoveryv1.EndpointPort, want string) (int32, bool) {
	for _, p := range ports {
		if p.Port == nil {
			continue
		}
		if want == "" || (p.Name != nil && *p.Name == want) || strconv.Itoa(int(*p.Port)) == want {
			return *p.Port, true
		}
	}
	return 0, false
}

// instanceID is the id of an endpoint: namespace.pod of its target (the address appended
// when the pod has several), else namespace.service.address.
func instanceID(svc *corev1.Service, ref *corev1.ObjectReference, addr string, several bool) string {
	addrPart := strings.NewReplacer(":", "-", "%", "-").Replace(addr)
	var id string
	if ref != nil && ref.Name != "" {
		ns := ref.Namespace
		if ns == "" {
			ns = svc.Namespace
		}
		id = ns + "." + ref.Name
		if several {
			id += "." + addrPart
		}
	} else {
		id = svc.Namespace + "." + svc.Name + "." + addrPart
	}
	return validID(id)
}

// validID keeps the characters an instance id may hold and its length.
func validID(id string) string {
	var b bytes.Buffer
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == ':', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	s := b.String()
	if len(s) > 253 {
		s = s[:253]
	}
	return s
}

// forInstance returns a copy of m naming instance id (nil for nil).
func forInstance(m *apiv1.Manifest, id string) *apiv1.Manifest {
	if m == nil {
		return nil
	}
	c := *m
	c.Service.Instance = id
	return &c
}

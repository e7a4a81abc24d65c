package kubesync

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

const testCaps = `[{"capability_id":"messaging.publish","capability_version":"1.2.0","provider":"jms","contract_schema_version":"1.0"}]`

func service(ns, name string, annotations map[string]string) *corev1.Service {
	a := map[string]string{AnnotationCapabilities: testCaps, AnnotationVersion: "1.2.0"}
	for k, v := range annotations {
		if v == "-" {
			delete(a, k)
		} else {
			a[k] = v
		}
	}
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: a}}
}

func TestParseSpec(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		labels      map[string]string
		want        Spec   // compared without Capabilities and Manifest
		wantErr     string // a part of the error
	}{
		{name: "defaults", want: Spec{ServiceName: "orders", ServiceVersion: "1.2.0", Scheme: "http", AddressType: discoveryv1.AddressTypeIPv4}},
		{name: "every annotation", annotations: map[string]string{AnnotationServiceName: "order-service", AnnotationPort: "http",
			AnnotationScheme: "https", AnnotationAddressType: "IPv6", AnnotationManifest: `{"farp":"1.0","routes":[],"x-extension":1}`, AnnotationTeam: "team-orders"},
			want: Spec{ServiceName: "order-service", ServiceVersion: "1.2.0", Port: "http", Scheme: "https", AddressType: discoveryv1.AddressTypeIPv6, Team: "team-orders"}},
		{name: "a team that is no DNS label", annotations: map[string]string{AnnotationTeam: "Team Orders"}, wantErr: "team"},
		{name: "version from the label", annotations: map[string]string{AnnotationVersion: "-"}, labels: map[string]string{LabelVersion: "2.0.0"},
			want: Spec{ServiceName: "orders", ServiceVersion: "2.0.0", Scheme: "http", AddressType: discoveryv1.AddressTypeIPv4}},
		{name: "no version", annotations: map[string]string{AnnotationVersion: "-"}, wantErr: "no version"},
		{name: "capabilities not JSON", annotations: map[string]string{AnnotationCapabilities: `[{"capability_id":`}, wantErr: AnnotationCapabilities},
		{name: "a misspelled capability field", annotations: map[string]string{AnnotationCapabilities: `[{"capability_idd":"x"}]`}, wantErr: "unknown field"},
		{name: "an invalid capability", annotations: map[string]string{AnnotationCapabilities: `[{"capability_id":"messaging.publish","capability_version":"1.x","provider":"jms","contract_schema_version":"1.0"}]`}, wantErr: "capability_version"},
		{name: "two problems named together", annotations: map[string]string{AnnotationScheme: "ftp", AnnotationAddressType: "IPv5"}, wantErr: "IPv5"},
		{name: "manifest not JSON", annotations: map[string]string{AnnotationManifest: "routes: []"}, wantErr: AnnotationManifest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := service("shop", "orders", tt.annotations)
			svc.Labels = tt.labels
			got, err := ParseSpec(svc)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one naming %q", err, tt.wantErr)
				}
				if tt.name == "two problems named together" && !strings.Contains(err.Error(), "ftp") {
					t.Errorf("error %v names one problem of two", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Capabilities) != 1 || got.Capabilities[0].CapabilityID != "messaging.publish" {
				t.Errorf("capabilities %+v", got.Capabilities)
			}
			got.Capabilities, got.Manifest = nil, nil
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func slice(ns, svc, name string, addrType discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{LabelServiceName: svc}},
		AddressType: addrType, Ports: ports, Endpoints: eps}
}

func pod(name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: name}
}

func TestEndpoints(t *testing.T) {
	ports := []discoveryv1.EndpointPort{{Name: ptr("metrics"), Port: ptr(int32(9090))}, {Name: ptr("http"), Port: ptr(int32(8080))}}
	type row struct {
		ID, Endpoint, Zone string
		Ready, Terminating bool
	}
	tests := []struct {
		name        string
		annotations map[string]string
		slices      []*discoveryv1.EndpointSlice
		want        []row
	}{
		{name: "the first port by default, ids from the pods, conditions as they are",
			slices: []*discoveryv1.EndpointSlice{slice("shop", "orders", "orders-a", discoveryv1.AddressTypeIPv4, ports,
				discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, TargetRef: pod("orders-7d9-abc"), Zone: ptr("eu-1a")},
				discoveryv1.Endpoint{Addresses: []string{"10.0.0.2"}, TargetRef: pod("orders-7d9-def"), Conditions: discoveryv1.EndpointConditions{Ready: ptr(false)}},
				discoveryv1.Endpoint{Addresses: []string{"10.0.0.3"}, TargetRef: pod("orders-7d9-ghi"), Conditions: discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}})},
			want: []row{
				{ID: "shop.orders-7d9-abc", Endpoint: "http://10.0.0.1:9090", Zone: "eu-1a", Ready: true},
				{ID: "shop.orders-7d9-def", Endpoint: "http://10.0.0.2:9090"},
				{ID: "shop.orders-7d9-ghi", Endpoint: "http://10.0.0.3:9090", Terminating: true},
			}},
		{name: "the port named, https, an address without a pod",
			annotations: map[string]string{AnnotationPort: "http", AnnotationScheme: "https"},
			slices: []*discoveryv1.EndpointSlice{slice("shop", "orders", "orders-a", discoveryv1.AddressTypeIPv4, ports,
				discoveryv1.Endpoint{Addresses: []string{"192.168.1.7"}})},
			want: []row{{ID: "shop.orders.192.168.1.7", Endpoint: "https://192.168.1.7:8080", Ready: true}}},
		{name: "the port by number",
			annotations: map[string]string{AnnotationPort: "8080"},
			slices: []*discoveryv1.EndpointSlice{slice("shop", "orders", "orders-a", discoveryv1.AddressTypeIPv4, ports,
				discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, TargetRef: pod("p")})},
			want: []row{{ID: "shop.p", Endpoint: "http://10.0.0.1:8080", Ready: true}}},
		{name: "a slice without the port gives nothing",
			annotations: map[string]string{AnnotationPort: "grpc"},
			slices: []*discoveryv1.EndpointSlice{slice("shop", "orders", "orders-a", discoveryv1.AddressTypeIPv4, ports,
				discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, TargetRef: pod("p")})},
			want: []row{}},
		{name: "one address family: a dual-stack pod is one instance",
			slices: []*discoveryv1.EndpointSlice{
				slice("shop", "orders", "orders-v4", discoveryv1.AddressTypeIPv4, ports, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, TargetRef: pod("p")}),
				slice("shop", "orders", "orders-v6", discoveryv1.AddressTypeIPv6, ports, discoveryv1.Endpoint{Addresses: []string{"fd00::1"}, TargetRef: pod("p")}),
			},
			want: []row{{ID: "shop.p", Endpoint: "http://10.0.0.1:9090", Ready: true}}},
		{name: "IPv6 asked",
			annotations: map[string]string{AnnotationAddressType: "IPv6"},
			slices: []*discoveryv1.EndpointSlice{
				slice("shop", "orders", "orders-v6", discoveryv1.AddressTypeIPv6, ports, discoveryv1.Endpoint{Addresses: []string{"fd00::1"}}),
			},
			want: []row{{ID: "shop.orders.fd00--1", Endpoint: "http://[fd00::1]:9090", Ready: true}}},
		{name: "a pod listed in two slices (a move between them) counts once, ready winning",
			slices: []*discoveryv1.EndpointSlice{
				slice("shop", "orders", "orders-a", discoveryv1.AddressTypeIPv4, ports, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, TargetRef: pod("p"), Conditions: discoveryv1.EndpointConditions{Ready: ptr(false)}}),
				slice("shop", "orders", "orders-b", discoveryv1.AddressTypeIPv4, ports, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, TargetRef: pod("p")}),
			},
			want: []row{{ID: "shop.p", Endpoint: "http://10.0.0.1:9090", Ready: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := service("shop", "orders", tt.annotations)
			spec, err := ParseSpec(svc)
			if err != nil {
				t.Fatal(err)
			}
			got := []row{}
			for _, e := range Endpoints(svc, spec, tt.slices) {
				if e.Request.ServiceName != "orders" || e.Request.ServiceVersion != "1.2.0" || len(e.Request.Capabilities) != 1 {
					t.Errorf("%s registers %+v", e.Request.InstanceID, e.Request)
				}
				if err := (&e.Request).Validate(); err != nil {
					t.Errorf("%s: the registration is invalid: %v", e.Request.InstanceID, err)
				}
				got = append(got, row{ID: e.Request.InstanceID, Endpoint: e.Request.Endpoint, Zone: e.Request.Zone, Ready: e.Ready, Terminating: e.Terminating})
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidIDKeepsWhatAnIDMayHold(t *testing.T) {
	for in, want := range map[string]string{
		"shop.orders-7d9-abc":    "shop.orders-7d9-abc",
		"shop.pod/with spaces":   "shop.pod-with-spaces",
		strings.Repeat("a", 300): strings.Repeat("a", 253),
	} {
		got := validID(in)
		if got != want {
			t.Errorf("validID(%q) = %q, want %q", in, got, want)
		}
		req := apiv1.RegisterRequest{InstanceID: got, ServiceName: "s", ServiceVersion: "1.0.0", Endpoint: "http://127.0.0.1:1",
			Capabilities: []apiv1.Capability{{CapabilityID: "a.b", CapabilityVersion: "1.0.0", Provider: "p", ContractSchemaVersion: "1.0"}}}
		if err := req.Validate(); err != nil {
			t.Errorf("%q: %v", got, err)
		}
	}
}

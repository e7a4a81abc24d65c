package kubesync

import (
	"context"
	"errors"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// API is what the syncer reads and writes in Kubernetes (a *Client does it; ns "" is every
// namespace).
type API interface {
	ListServices(ctx context.Context, ns string, o metav1.ListOptions) (*corev1.ServiceList, error)
	WatchServices(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error)
	ListEndpointSlices(ctx context.Context, ns string, o metav1.ListOptions) (*discoveryv1.EndpointSliceList, error)
	WatchEndpointSlices(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error)
	CreateEvent(ctx context.Context, ev *corev1.Event) error
}

// LeaseAPI is what leader election reads and writes (a *Client does it).
type LeaseAPI interface {
	GetLease(ctx context.Context, ns, name string) (*coordinationv1.Lease, error)
	CreateLease(ctx context.Context, l *coordinationv1.Lease) error
	UpdateLease(ctx context.Context, l *coordinationv1.Lease) error
}

// Client is a Kubernetes API client for exactly the kinds kube-sync uses: Services and
// Events (core/v1), EndpointSlices (discovery.k8s.io/v1) and Leases (coordination.k8s.io/v1),
// in JSON, over client-go's REST client. client-go's generated typed clients register every
// API group of Kubernetes in one scheme when the program starts, which costs the meshflows
// binary about 19 MB of resident memory in every command; this client's scheme holds three
// groups.
type Client struct {
	core, discovery, coordination *rest.RESTClient
	params                        runtime.ParameterCodec
}

// NewClient returns a Client for cfg (from a kubeconfig or the pod's ServiceAccount).
func NewClient(cfg *rest.Config) (*Client, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, discoveryv1.AddToScheme, coordinationv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("kubesync: scheme: %w", err)
		}
	}
	codecs := serializer.NewCodecFactory(scheme)
	build := func(gv schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion, c.APIPath = &gv, apiPath
		c.NegotiatedSerializer = codecs.WithoutConversion()
		c.ContentType, c.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
		if c.UserAgent == "" {
			c.UserAgent = "meshflows-kube-sync"
		}
		rc, err := rest.RESTClientFor(c)
		if err != nil {
			return nil, fmt.Errorf("kubesync: a client for %s: %w", gv, err)
		}
		return rc, nil
	}
	var c Client
	var errs [3]error
	c.core, errs[0] = build(corev1.SchemeGroupVersion, "/api")
	c.discovery, errs[1] = build(discoveryv1.SchemeGroupVersion, "/apis")
	c.coordination, errs[2] = build(coordinationv1.SchemeGroupVersion, "/apis")
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	c.params = runtime.NewParameterCodec(scheme)
	return &c, nil
}

func (c *Client) list(ctx context.Context, rc *rest.RESTClient, ns, resource string, o metav1.ListOptions, into runtime.Object) error {
	return rc.Get().Namespace(ns).Resource(resource).VersionedParams(&o, c.params).Do(ctx).Into(into)
}

func (c *Client) watch(ctx context.Context, rc *rest.RESTClient, ns, resource string, o metav1.ListOptions) (watch.Interface, error) {
	o.Watch = true
	return rc.Get().Namespace(ns).Resource(resource).VersionedParams(&o, c.params).Watch(ctx)
}

// ListServices lists the Services of ns.
func (c *Client) ListServices(ctx context.Context, ns string, o metav1.ListOptions) (*corev1.ServiceList, error) {
	var out corev1.ServiceList
	return &out, c.list(ctx, c.core, ns, "services", o, &out)
}

// WatchServices watches the Services of ns.
func (c *Client) WatchServices(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
	return c.watch(ctx, c.core, ns, "services", o)
}

// ListEndpointSlices lists the EndpointSlices of ns.
func (c *Client) ListEndpointSlices(ctx context.Context, ns string, o metav1.ListOptions) (*discoveryv1.EndpointSliceList, error) {
	var out discoveryv1.EndpointSliceList
	return &out, c.list(ctx, c.discovery, ns, "endpointslices", o, &out)
}

// WatchEndpointSlices watches the EndpointSlices of ns.
func (c *Client) WatchEndpointSlices(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
	return c.watch(ctx, c.discovery, ns, "endpointslices", o)
}

// CreateEvent records ev in its namespace.
func (c *Client) CreateEvent(ctx context.Context, ev *corev1.Event) error {
	return c.core.Post().Namespace(ev.Namespace).Resource("events").Body(ev).Do(ctx).Error()
}

// GetLease reads Lease ns/name.
func (c *Client) GetLease(ctx context.Context, ns, name string) (*coordinationv1.Lease, error) {
	var out coordinationv1.Lease
	return &out, c.coordination.Get().Namespace(ns).Resource("leases").Name(name).Do(ctx).Into(&out)
}

// CreateLease creates l.
func (c *Client) CreateLease(ctx context.Context, l *coordinationv1.Lease) error {
	return c.coordination.Post().Namespace(l.Namespace).Resource("leases").Body(l).Do(ctx).Error()
}

// UpdateLease replaces l, fenced by its resourceVersion (a conflict when another wrote it).
func (c *Client) UpdateLease(ctx context.Context, l *coordinationv1.Lease) error {
	return c.coordination.Put().Namespace(l.Namespace).Resource("leases").Name(l.Name).Body(l).Do(ctx).Error()
}

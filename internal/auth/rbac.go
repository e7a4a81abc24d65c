package auth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccy/go-yaml"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/routing"
)

// Role is what a role allows.
type Role struct {
	// Capabilities are globs over dotted capability ids: "messaging.*" matches
	// "messaging.publish" ('*' stays within one dotted segment), "messaging.**" matches
	// "messaging.publish.batch" too, and "**" matches every id.
	Capabilities []string `yaml:"capabilities"`
	// PathPrefixes are what the role's manifest routes may claim (conformance README rule).
	PathPrefixes []string `yaml:"path_prefixes"`
	// Discover allows discovery queries.
	Discover bool `yaml:"discover"`
	// Gateway allows reporting passive outcomes (POST /v1/outcomes); a gateway role
	// usually also has discover.
	Gateway bool `yaml:"gateway"`
	// Admin allows everything, admin endpoints included.
	Admin bool `yaml:"admin"`
	// Workflows are the orchestrator verbs the role grants: read (list and show workflows,
	// their validation and runs), write (upload, re-validate, publish, invalidate the
	// orchestrator's discovery view) and run (start a run). Write and run imply read. One
	// verb or a list: "workflows: run" or "workflows: [write, run]".
	Workflows Verbs `yaml:"workflows"`
	// GatewayAdmin allows the gateway's admin endpoints: the full routing table and
	// invalidation (everyone else sees a summary of the table).
	GatewayAdmin bool `yaml:"gateway_admin"`
	// XDS allows subscribing to the xDS server (every cluster, listener, route and
	// endpoint of the fleet: as much as discovery shows, and the gateway's table).
	XDS bool `yaml:"xds"`
}

// Verbs is a role's list of verbs, written as one verb or a list of them.
type Verbs []string

// UnmarshalYAML accepts a scalar (one verb) or a sequence of verbs.
func (v *Verbs) UnmarshalYAML(data []byte) error {
	var one string
	if err := yaml.Unmarshal(data, &one); err == nil {
		*v = Verbs{one}
		return nil
	}
	var many []string
	if err := yaml.Unmarshal(data, &many); err != nil {
		return errors.New("want a verb (read, write, run) or a list of them")
	}
	*v = many
	return nil
}

// The permissions an endpoint of the gateway or the orchestrator can require (see
// Policy.Allows).
const (
	// WorkflowsRead: list and show workflows, their validation and their runs.
	WorkflowsRead = "workflows:read"
	// WorkflowsWrite: upload, re-validate and publish workflows, invalidate the
	// orchestrator's discovery view.
	WorkflowsWrite = "workflows:write"
	// WorkflowsRun: start a workflow run.
	WorkflowsRun = "workflows:run"
	// GatewayAdmin: the gateway's full routing table and its invalidation.
	GatewayAdmin = "gateway_admin"
	// XDS: subscribing to the xDS server.
	XDS = "xds"
)

// workflowVerbs are the verbs "workflows:" takes, each with the verbs it implies.
var workflowVerbs = map[string][]string{
	"read":  {WorkflowsRead},
	"write": {WorkflowsWrite, WorkflowsRead},
	"run":   {WorkflowsRun, WorkflowsRead},
}

// Policy is a parsed RBAC file: identities to roles, roles to permissions.
type Policy struct {
	Identities map[string][]string `yaml:"identities"`
	Roles      map[string]Role     `yaml:"roles"`
}

// ParsePolicy reads and checks an RBAC document: unknown fields, roles that do not exist,
// malformed globs and prefixes are all errors, reported together.
func ParsePolicy(data []byte) (*Policy, error) {
	var p Policy
	if err := decodeYAML(data, &p); err != nil {
		return nil, fmt.Errorf("rbac: %w", err)
	}
	var errs []error
	if len(p.Identities) == 0 && len(p.Roles) == 0 {
		errs = append(errs, errors.New("rbac: no identities and no roles"))
	}
	for id, roles := range p.Identities {
		if id == "" {
			errs = append(errs, errors.New("rbac: an empty identity"))
		}
		for _, r := range roles {
			if _, ok := p.Roles[r]; !ok {
				errs = append(errs, fmt.Errorf("rbac: identity %q has role %q, which is not defined", id, r))
			}
		}
	}
	for name, r := range p.Roles {
		for _, g := range r.Capabilities {
			if _, err := path.Match(globPath(g), "x"); err != nil || g == "" {
				errs = append(errs, fmt.Errorf("rbac: role %q: capability pattern %q is malformed", name, g))
			}
		}
		for _, v := range r.Workflows {
			if _, ok := workflowVerbs[v]; !ok {
				errs = append(errs, fmt.Errorf("rbac: role %q: workflows verb %q is not one of read, write, run", name, v))
			}
		}
		for _, pre := range r.PathPrefixes {
			segs, err := apiv1.ParsePath(strings.TrimSuffix(pre, "/"))
			if pre != "/" && err != nil {
				errs = append(errs, fmt.Errorf("rbac: role %q: path prefix %q: %v", name, pre, err))
				continue
			}
			for _, s := range segs {
				if s.Kind != apiv1.Literal {
					errs = append(errs, fmt.Errorf("rbac: role %q: path prefix %q must be literal segments only", name, pre))
					break
				}
			}
		}
	}
	if len(errs) > 0 {
		sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
		return nil, errors.Join(errs...)
	}
	return &p, nil
}

// decodeYAML decodes strictly and turns a decoder panic into an error: goccy/go-yaml
// v1.19.2 panics on a tag over a scalar where a sequence is expected (goccy/go-yaml#735,
// fixed upstream after that release; our fuzz target found it, testdata/fuzz keeps the case).
// A bad RBAC file must be refused, never crash the registry on reload.
func decodeYAML(data []byte, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed YAML (decoder panic: %v)", r)
		}
	}()
	return yaml.UnmarshalWithOptions(data, v, yaml.Strict())
}

// globPath turns a dotted glob into a path.Match pattern ('.' as the separator).
func globPath(g string) string { return strings.ReplaceAll(g, ".", "/") }

// CapabilityMatches reports whether a capability id matches a role's glob, segment by
// dotted segment: a "**" segment matches one or more segments, any other segment matches
// one segment with path.Match rules ("*", "?", "[a-z]").
func CapabilityMatches(glob, id string) bool {
	return matchSegments(strings.Split(glob, "."), strings.Split(id, "."))
}

func matchSegments(glob, id []string) bool {
	for len(glob) > 0 {
		if glob[0] == "**" {
			for i := 1; i <= len(id); i++ {
				if matchSegments(glob[1:], id[i:]) {
					return true
				}
			}
			return false
		}
		if len(id) == 0 {
			return false
		}
		if ok, err := path.Match(glob[0], id[0]); err != nil || !ok {
			return false
		}
		glob, id = glob[1:], id[1:]
	}
	return len(id) == 0
}

func (p *Policy) roles(identity string) []Role {
	var out []Role
	for _, name := range p.Identities[identity] {
		out = append(out, p.Roles[name])
	}
	return out
}

// HasRoles reports whether identity has any role.
func (p *Policy) HasRoles(identity string) bool { return len(p.roles(identity)) > 0 }

// IsAdmin reports whether identity has an admin role.
func (p *Policy) IsAdmin(identity string) bool {
	return slices.ContainsFunc(p.roles(identity), func(r Role) bool { return r.Admin })
}

// IsGateway reports whether identity may report gateway outcomes: a gateway role, or admin.
func (p *Policy) IsGateway(identity string) bool {
	return slices.ContainsFunc(p.roles(identity), func(r Role) bool { return r.Gateway || r.Admin })
}

// Allows reports whether identity may do perm (WorkflowsRead, WorkflowsWrite, WorkflowsRun,
// GatewayAdmin, XDS): a role that grants it, or admin.
func (p *Policy) Allows(identity, perm string) bool {
	return slices.ContainsFunc(p.roles(identity), func(r Role) bool {
		if r.Admin || (perm == GatewayAdmin && r.GatewayAdmin) || (perm == XDS && r.XDS) {
			return true
		}
		return slices.ContainsFunc(r.Workflows, func(v string) bool { return slices.Contains(workflowVerbs[v], perm) })
	})
}

// CanDiscover reports whether identity may query discovery: a role with discover, a
// provider role (one that grants capabilities) or admin.
func (p *Policy) CanDiscover(identity string) bool {
	return slices.ContainsFunc(p.roles(identity), func(r Role) bool { return r.Discover || r.Admin || len(r.Capabilities) > 0 })
}

// PathPrefixes returns every prefix identity's roles grant (for the gateway's path policy).
func (p *Policy) PathPrefixes(identity string) []string {
	var out []string
	for _, r := range p.roles(identity) {
		if r.Admin {
			return []string{"/"}
		}
		out = append(out, r.PathPrefixes...)
	}
	return out
}

// CanRegister checks a registration against identity's roles: the service name must be the
// identity (admin excepted), every capability must match a pattern and every manifest route
// must lie inside a prefix. It returns nil or a 403 FORBIDDEN naming every offending field.
func (p *Policy) CanRegister(identity string, req *apiv1.RegisterRequest) error {
	roles := p.roles(identity)
	if len(roles) == 0 {
		return apiv1.Errorf(http.StatusForbidden, apiv1.CodeForbidden, "identity %q has no roles", identity)
	}
	if p.IsAdmin(identity) {
		return nil
	}
	var ds []apiv1.Detail
	if req.ServiceName != identity {
		ds = append(ds, apiv1.Detail{Path: "service_name", Message: fmt.Sprintf("identity %q may only register service %q, not %q", identity, identity, req.ServiceName)})
	}
	for i, c := range req.Capabilities {
		allowed := slices.ContainsFunc(roles, func(r Role) bool {
			return slices.ContainsFunc(r.Capabilities, func(g string) bool { return CapabilityMatches(g, c.CapabilityID) })
		})
		if !allowed {
			ds = append(ds, apiv1.Detail{Path: fmt.Sprintf("capabilities[%d].capability_id", i),
				Message: fmt.Sprintf("capability %q is outside every role of identity %q", c.CapabilityID, identity)})
		}
	}
	prefixes := p.PathPrefixes(identity)
	// The gateway's own rule, on the text of a path the request's validation accepted.
	within := func(path string) bool { return routing.Granted(path, prefixes) }
	for i, c := range req.Capabilities {
		// A public path is a route like a manifest's: the same prefix rule (a provider could
		// otherwise publish /admin, or another service's path, as its own).
		paths, _ := c.PublicPaths()
		for j, pp := range paths {
			if !within(pp) {
				ds = append(ds, apiv1.Detail{Path: fmt.Sprintf("capabilities[%d].metadata.public_paths[%d]", i, j),
					Message: fmt.Sprintf("public path %q is outside every path prefix of identity %q (%s)", pp, identity, strings.Join(prefixes, ", "))})
			}
		}
	}
	if req.Manifest != nil {
		for i, rt := range req.Manifest.Routes {
			if !within(rt.Path) {
				ds = append(ds, apiv1.Detail{Path: fmt.Sprintf("manifest.routes[%d].path", i),
					Message: fmt.Sprintf("path %q is outside every path prefix of identity %q (%s)", rt.Path, identity, strings.Join(prefixes, ", "))})
			}
		}
	}
	if len(ds) > 0 {
		return &apiv1.Error{Status: http.StatusForbidden, Code: apiv1.CodeForbidden,
			Message: fmt.Sprintf("identity %q may not register this", identity), Details: ds}
	}
	return nil
}

// PolicyFile is a Policy read from a file and reloaded when the file changes; an invalid
// new version is refused with a logged error and the old policy stays in force.
type PolicyFile struct {
	path    string
	logger  *slog.Logger
	current atomic.Pointer[Policy]

	mu     sync.Mutex // serialises reloads
	loaded []byte     // the bytes of the policy in force
}

// LoadPolicyFile reads the policy at path; an invalid file is an error.
func LoadPolicyFile(path string, logger *slog.Logger) (*PolicyFile, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	f := &PolicyFile{path: path, logger: logger}
	if _, err := f.Reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Policy returns the policy in force.
func (f *PolicyFile) Policy() *Policy { return f.current.Load() }

// Reload reads the file again; it reports whether the policy changed. An invalid file
// leaves the current policy in force and returns the error.
func (f *PolicyFile) Reload() (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, err := os.ReadFile(f.path)
	if err != nil {
		return false, fmt.Errorf("rbac file: %w", err)
	}
	if f.current.Load() != nil && bytes.Equal(data, f.loaded) {
		return false, nil
	}
	p, err := ParsePolicy(data)
	if err != nil {
		return false, fmt.Errorf("rbac file %s: %w", f.path, err)
	}
	f.current.Store(p)
	f.loaded = data
	return true, nil
}

// Run checks the file every interval until ctx ends, reloading it when its content
// changed; a refused file is logged and the old policy stays.
func (f *PolicyFile) Run(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			changed, err := f.Reload()
			switch {
			case err != nil:
				f.logger.Error("rbac reload refused; the previous policy stays in force", slog.Any("error", err))
			case changed:
				f.logger.Info("rbac policy reloaded", slog.String("path", f.path))
			}
		}
	}
}

// Each PolicyFile method reads the policy in force at the moment of the call.

// CanRegister implements the server's policy with the policy in force.
func (f *PolicyFile) CanRegister(identity string, req *apiv1.RegisterRequest) error {
	return f.Policy().CanRegister(identity, req)
}

// CanDiscover implements the server's policy with the policy in force.
func (f *PolicyFile) CanDiscover(identity string) bool { return f.Policy().CanDiscover(identity) }

// IsAdmin implements the server's policy with the policy in force.
func (f *PolicyFile) IsAdmin(identity string) bool { return f.Policy().IsAdmin(identity) }

// Allows reports whether identity may do perm under the policy in force.
func (f *PolicyFile) Allows(identity, perm string) bool { return f.Policy().Allows(identity, perm) }

// IsGateway implements the server's policy with the policy in force.
func (f *PolicyFile) IsGateway(identity string) bool { return f.Policy().IsGateway(identity) }

// HasRoles is Policy.HasRoles of the current policy.
func (f *PolicyFile) HasRoles(identity string) bool { return f.Policy().HasRoles(identity) }

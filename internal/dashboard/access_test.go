package dashboard_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/dashboard"
)

// fakeViewers identifies "Bearer as:<name>" and grants each name its permissions (an RBAC
// file's, in production).
type fakeViewers map[string][]string

func (f fakeViewers) Identify(r *http.Request) (string, error) {
	name, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer as:")
	if !ok {
		return "", errors.New("no credential")
	}
	if _, known := f[name]; !known {
		return "", errors.New("unknown token")
	}
	return name, nil
}

func (f fakeViewers) Allows(identity, perm string) bool {
	return slices.Contains(f[identity], perm) || slices.Contains(f[identity], dashboard.PermAdmin)
}

var viewers = fakeViewers{
	"nobody":  {},
	"catalog": {dashboard.PermDiscover},
	"author":  {dashboard.PermWorkflowsRead, dashboard.PermWorkflowsWrite},
	"ops":     {dashboard.PermGatewayAdmin},
	"root":    {dashboard.PermAdmin},
}

// consolePages is every page, fragment and export with the permission it needs ("" for any
// identity).
var consolePages = []struct{ path, perm string }{
	{"/", ""}, {"/runbooks", ""},
	{"/capabilities", dashboard.PermDiscover}, {"/capabilities/fragment", dashboard.PermDiscover},
	{"/logs", dashboard.PermDiscover}, {"/events", dashboard.PermDiscover}, {"/registry/metrics", dashboard.PermDiscover}, {"/incidents/1", dashboard.PermDiscover}, {"/slice?capability=c&from=0", dashboard.PermDiscover}, {"/compare?capability=c", dashboard.PermDiscover}, {"/slice?route=GET%20/x&from=0", dashboard.PermGatewayAdmin}, {"/compare?route=GET%20/x", dashboard.PermGatewayAdmin}, {"/events/fragment", dashboard.PermDiscover}, {"/events/export", dashboard.PermDiscover},
	{"/incidents", dashboard.PermDiscover}, {"/incidents/timeline.csv", dashboard.PermDiscover}, {"/evacuations", dashboard.PermDiscover},
	{"/validation", dashboard.PermWorkflowsRead}, {"/validation/w/export", dashboard.PermWorkflowsRead},
	{"/workflows", dashboard.PermWorkflowsRead}, {"/workflows/w/runs/r", dashboard.PermWorkflowsRead},
	{"/workflows/w/runs", dashboard.PermWorkflowsRead}, {"/workflows/health.csv", dashboard.PermWorkflowsRead},
	{"/routes", dashboard.PermGatewayAdmin}, {"/routes/map", dashboard.PermGatewayAdmin}, {"/routes/health.csv", dashboard.PermGatewayAdmin},
}

// TestEveryPageNeedsItsReadPermission: every page × identity — no credential (sent to the
// sign-in page, or 401 for a fragment or an export), identities with and without the page's
// permission (403, nothing of the page), the admin token (everything).
func TestEveryPageNeedsItsReadPermission(t *testing.T) {
	d, err := dashboard.New(dashboard.Config{AdminToken: "s3cret", Viewers: viewers})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	identities := []string{"", "nobody", "catalog", "author", "ops", "root", "token"}
	for _, p := range consolePages {
		for _, id := range identities {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+p.path, nil)
			switch id {
			case "":
			case "token":
				req.Header.Set("Authorization", "Bearer s3cret")
			default:
				req.Header.Set("Authorization", "Bearer as:"+id)
			}
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			allowed := id == "token" || (id != "" && (p.perm == "" || viewers.Allows(id, p.perm)))
			switch {
			case id == "" && (strings.HasSuffix(p.path, ".csv") || strings.HasSuffix(p.path, "/fragment") || strings.HasSuffix(p.path, "/export")):
				if resp.StatusCode != http.StatusUnauthorized {
					t.Errorf("GET %s without a credential = %d, want 401", p.path, resp.StatusCode)
				}
			case id == "":
				if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login?next="+url.QueryEscape(p.path)) {
					t.Errorf("GET %s without a credential = %d to %q, want 303 to the sign-in page", p.path, resp.StatusCode, resp.Header.Get("Location"))
				}
			case allowed:
				if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusSeeOther {
					t.Errorf("GET %s as %s = %d, want it served", p.path, id, resp.StatusCode)
				}
			default:
				if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), p.perm) || strings.Contains(string(body), "<nav>") {
					t.Errorf("GET %s as %s = %d, want 403 naming %s and nothing of the page:\n%.300s", p.path, id, resp.StatusCode, p.perm, body)
				}
			}
		}
	}
}

// TestTheOverviewWithholdsWhatTheViewerMayNotSee: an identity with discover only gets an
// overview that says the gateway's table and the workflows were withheld.
func TestTheOverviewWithholdsWhatTheViewerMayNotSee(t *testing.T) {
	d, err := dashboard.New(dashboard.Config{AdminToken: "s3cret", Viewers: viewers})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	req.Header.Set("Authorization", "Bearer as:catalog")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"the gateway&#39;s table withheld", "the workflows withheld", `signed in as <b id="viewer">catalog</b>`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the overview lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(string(body), `id="workflows-card"`) || strings.Contains(string(body), `id="gateway-card"`) {
		t.Error("the overview shows a card the viewer may not see")
	}
}

// TestSignInSessionsAndWrites: the sign-in page takes the admin token or a bearer token
// Viewers accepts and sets a session cookie (HttpOnly, SameSite=Strict); the session reads
// pages and does what its identity may; a tampered or expired cookie is no session; a
// cross-origin write with the cookie is refused; sign-out ends it.
func TestSignInSessionsAndWrites(t *testing.T) {
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	d, err := dashboard.New(dashboard.Config{AdminToken: "s3cret", Viewers: viewers, Now: func() time.Time { return now }, SessionTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	signIn := func(token string) (*http.Response, *http.Cookie) {
		resp, err := noRedirect.PostForm(srv.URL+"/login", url.Values{"token": {token}, "next": {"/capabilities"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for _, c := range resp.Cookies() {
			if c.Name == "meshflows_session" {
				return resp, c
			}
		}
		return resp, nil
	}
	get := func(path string, c *http.Cookie) int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if c != nil {
			req.AddCookie(c)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if resp, c := signIn("wrong"); resp.StatusCode != http.StatusUnauthorized || c != nil {
		t.Errorf("a wrong token signs in: %d, cookie %v", resp.StatusCode, c)
	}
	resp, catalog := signIn("as:catalog")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/capabilities" || catalog == nil {
		t.Fatalf("sign-in with a bearer token: %d to %q, cookie %v", resp.StatusCode, resp.Header.Get("Location"), catalog)
	}
	if !catalog.HttpOnly || catalog.SameSite != http.SameSiteStrictMode {
		t.Errorf("the session cookie is not HttpOnly and SameSite=Strict: %+v", catalog)
	}
	if got := get("/capabilities", catalog); got != 200 {
		t.Errorf("/capabilities with catalog's session = %d", got)
	}
	if got := get("/workflows", catalog); got != http.StatusForbidden {
		t.Errorf("/workflows with catalog's session = %d, want 403", got)
	}
	tampered := *catalog
	tampered.Value = strings.Replace(catalog.Value, catalog.Value[:4], "cm9v", 1) // another identity, the old signature
	if got := get("/capabilities", &tampered); got != http.StatusSeeOther {
		t.Errorf("/capabilities with a tampered session = %d, want the sign-in page", got)
	}
	post := func(path string, c *http.Cookie, origin string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(""))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(c)
		if origin != "" {
			req.Header.Set("Origin", origin)
			req.Header.Set("Sec-Fetch-Site", "cross-site")
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post("/capabilities/refresh", catalog, ""); got != http.StatusForbidden {
		t.Errorf("refresh (admin) with catalog's session = %d, want 403", got)
	}
	for _, action := range []string{"/incidents/1/scale", "/validation/w/publish"} { // admin; workflows:write
		if got := post(action, catalog, ""); got != http.StatusForbidden {
			t.Errorf("%s with catalog's session = %d, want 403", action, got)
		}
	}
	_, admin := signIn("s3cret")
	if got := post("/capabilities/refresh", admin, ""); got == http.StatusForbidden || got == http.StatusUnauthorized {
		t.Errorf("refresh with the admin token's session = %d", got)
	}
	if got := post("/capabilities/refresh", admin, "https://evil.example"); got != http.StatusForbidden {
		t.Errorf("a cross-origin refresh with the admin session = %d, want 403", got)
	}
	now = now.Add(time.Hour)
	if got := get("/capabilities", catalog); got != http.StatusSeeOther {
		t.Errorf("/capabilities with an expired session = %d, want the sign-in page", got)
	}
	resp, err = noRedirect.Post(srv.URL+"/logout", "application/x-www-form-urlencoded", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if cs := resp.Cookies(); len(cs) != 1 || cs[0].MaxAge >= 0 {
		t.Errorf("sign-out does not clear the cookie: %v", cs)
	}
}

// TestSessionsEnd: a session ends at logout — the cookie kept and sent again is no sign-in —
// and a new admin token (the token file read again) ends every session the old token
// signed, while sessions of other identities go on.
func TestSessionsEnd(t *testing.T) {
	d, err := dashboard.New(dashboard.Config{AdminToken: "s3cret", Viewers: viewers, SessionTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	signIn := func(token string) *http.Cookie {
		resp, err := noRedirect.PostForm(srv.URL+"/login", url.Values{"token": {token}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for _, c := range resp.Cookies() {
			if c.Name == "meshflows_session" {
				return c
			}
		}
		t.Fatalf("sign-in with %q set no session", token)
		return nil
	}
	do := func(method, path string, c *http.Cookie) int {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		req.AddCookie(c)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	admin := signIn("s3cret")
	if got := do("GET", "/capabilities", admin); got != 200 {
		t.Fatalf("/capabilities signed in = %d", got)
	}
	if got := do("POST", "/logout", admin); got != http.StatusSeeOther {
		t.Fatalf("logout = %d", got)
	}
	if got := do("GET", "/capabilities", admin); got != http.StatusSeeOther {
		t.Errorf("/capabilities with the cookie of a session logged out = %d, want the sign-in page", got)
	}
	admin, catalog := signIn("s3cret"), signIn("as:catalog")
	d.SetAdminToken("n3w")
	if got := do("GET", "/capabilities", admin); got != http.StatusSeeOther {
		t.Errorf("/capabilities with a session of the rotated admin token = %d, want the sign-in page", got)
	}
	if got := do("GET", "/capabilities", catalog); got != 200 {
		t.Errorf("/capabilities with another identity's session after the rotation = %d, want it to go on", got)
	}
	if got := do("GET", "/capabilities", signIn("n3w")); got != 200 {
		t.Errorf("/capabilities signed in with the new token = %d", got)
	}
	resp, err := noRedirect.PostForm(srv.URL+"/login", url.Values{"token": {"s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the old token signs in after the rotation: %d", resp.StatusCode)
	}
	noRedirect.CloseIdleConnections()
}

// TestSignInRedirectsOnlyWithinTheConsole: next is a path of the console, never another site.
func TestSignInRedirectsOnlyWithinTheConsole(t *testing.T) {
	d, err := dashboard.New(dashboard.Config{AdminToken: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for next, want := range map[string]string{"/events": "/events", "//evil.example/x": "/", "https://evil.example": "/", `/\evil.example`: "/"} {
		resp, err := noRedirect.PostForm(srv.URL+"/login", url.Values{"token": {"s3cret"}, "next": {next}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Location"); got != want {
			t.Errorf("next %q: redirected to %q, want %q", next, got, want)
		}
	}
}

// TestIncidentActionsNameTheViewer: the console acts on an incident for its viewer, naming
// them to the registry (which judges them, not the console), and passes the registry's
// refusal on.
func TestIncidentActionsNameTheViewer(t *testing.T) {
	var mu sync.Mutex
	var named []string
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		named = append(named, r.Header.Get(apiv1.HeaderActingFor)+"/"+r.Header.Get(apiv1.HeaderActingAdmin))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `{"error":{"code":"FORBIDDEN","message":"identity \"catalog\" may not act on incident 1"}}`)
	}))
	defer reg.Close()
	d, err := dashboard.New(dashboard.Config{RegistryURL: reg.URL, AdminToken: "s3cret", Viewers: viewers})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	act := func(auth string) int {
		req, _ := http.NewRequest("POST", srv.URL+"/incidents/1/acknowledge", strings.NewReader("comment=x"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := act("Bearer as:catalog"); got != http.StatusForbidden {
		t.Errorf("a viewer the registry refuses: %d, want its 403 passed on", got)
	}
	act("Bearer s3cret")
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(named) != "[catalog/ admin (token)/true]" {
		t.Errorf("the registry was told %v, want the viewer catalog, then the admin token's viewer as an admin", named)
	}
}

package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// The permissions a page or an action of the console needs: those of the API it shows,
// with the RBAC file's names.
const (
	// PermDiscover: the catalog, events, incidents and evacuations (the registry's discover).
	PermDiscover = "discover"
	// PermWorkflowsRead: the workflows, their validation and runs.
	PermWorkflowsRead = "workflows:read"
	// PermWorkflowsWrite: upload and re-validate workflows.
	PermWorkflowsWrite = "workflows:write"
	// PermWorkflowsRun: run a workflow, cancel a run.
	PermWorkflowsRun = "workflows:run"
	// PermGatewayAdmin: the gateway's full table (routes, route map, route health).
	PermGatewayAdmin = "gateway_admin"
	// PermAdmin: invalidating discovery caches, cancelling and extending evacuations.
	PermAdmin = "admin"
	// permSignedIn: any identity (the overview, whose parts each need their own, and the
	// runbooks).
	permSignedIn = ""
)

// Viewers identifies who reads the console — by the verified client certificate of the
// connection or a bearer token — and says what each identity may see and do; the RBAC file
// of the registry, in practice.
type Viewers interface {
	// Identify returns the identity of r's caller, or an error when r carries no
	// acceptable credential.
	Identify(r *http.Request) (string, error)
	// Allows reports whether identity may do perm (one of the Perm constants).
	Allows(identity, perm string) bool
}

// DefaultSessionTTL is how long a sign-in lasts.
const DefaultSessionTTL = 8 * time.Hour

// adminViewer is the identity of a sign-in with the admin token.
const adminViewer = "admin (token)"

// sessionCookie is the cookie of a sign-in.
const sessionCookie = "meshflows_session"

// viewer is who makes a request: identity, and all when it may do everything (open mode, the
// admin token).
type viewer struct {
	identity string
	all      bool
	// session: identified by the sign-in cookie (write actions then need a same-origin
	// request, which CrossOriginProtection checks).
	session bool
}

type viewerKey struct{}

// viewerOf returns the viewer the guard put in r's context (the zero viewer outside one).
func viewerOf(r *http.Request) viewer {
	v, _ := r.Context().Value(viewerKey{}).(viewer)
	return v
}

// may reports whether v may do perm.
func (d *Dashboard) may(v viewer, perm string) bool {
	if v.all || perm == permSignedIn {
		return true
	}
	return d.cfg.Viewers != nil && d.cfg.Viewers.Allows(v.identity, perm)
}

// identify returns r's viewer: open mode, the sign-in cookie, the admin token as a bearer
// token, or what Viewers makes of the connection's certificate or bearer token.
func (d *Dashboard) identify(r *http.Request) (viewer, error) {
	if d.cfg.Insecure {
		return viewer{all: true}, nil
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		if id, ok := d.openSession(c.Value); ok {
			return viewer{identity: id, all: id == adminViewer, session: true}, nil
		}
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && d.isAdminToken(tok) {
		return viewer{identity: adminViewer, all: true}, nil
	}
	if d.cfg.Viewers == nil {
		return viewer{}, fmt.Errorf("sign in with the admin token")
	}
	id, err := d.cfg.Viewers.Identify(r)
	if err != nil {
		return viewer{}, err
	}
	return viewer{identity: id}, nil
}

func (d *Dashboard) isAdminToken(tok string) bool {
	admin := d.adminToken.Load()
	return admin != nil && *admin != "" && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(*admin)) == 1
}

// read guards a page, a fragment or an export with perm: an unidentified caller is sent to
// the sign-in page (an HTML page) or answered 401; one without perm, 403 naming it.
func (d *Dashboard) read(perm string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := d.identify(r)
		if err != nil {
			if r.Method == http.MethodGet && wantsHTML(r) {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="meshflows-console"`)
			http.Error(w, "unauthenticated: "+err.Error(), http.StatusUnauthorized)
			return
		}
		if !d.may(v, perm) {
			http.Error(w, fmt.Sprintf("identity %q may not see this: it needs a role granting %s (or admin)", v.identity, perm), http.StatusForbidden)
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), viewerKey{}, v)))
	}
}

// wantsHTML reports whether r is a browser's page request (not a fragment, a CSV or JSON).
func wantsHTML(r *http.Request) bool {
	if strings.HasSuffix(r.URL.Path, "/fragment") || strings.HasSuffix(r.URL.Path, ".csv") || strings.HasSuffix(r.URL.Path, "/export") {
		return false
	}
	a := r.Header.Get("Accept")
	return a == "" || strings.Contains(a, "text/html") || strings.Contains(a, "*/*")
}

// write guards a write action with perm: the admin token (header or form field "token"), a
// sign-in or an identity that may do perm. Each action is logged with who did it.
func (d *Dashboard) write(perm string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := d.identify(r)
		if tok := r.FormValue("token"); !v.all && tok != "" && d.isAdminToken(tok) {
			v, err = viewer{identity: adminViewer, all: true}, nil
		}
		switch {
		case err != nil:
			http.Error(w, "write actions need the admin token or a signed-in identity: "+err.Error(), http.StatusUnauthorized)
			return
		case !d.may(v, perm):
			http.Error(w, fmt.Sprintf("identity %q may not do this: it needs a role granting %s (or admin), or the admin token", v.identity, perm), http.StatusForbidden)
			return
		}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h(rec, r.WithContext(context.WithValue(r.Context(), viewerKey{}, v)))
		d.cfg.Logger.Info("console action", slog.String("identity", v.identity), slog.String("action", r.Method+" "+r.URL.Path),
			slog.Int("status", rec.status), slog.String("remote", r.RemoteAddr))
	}
}

// statusRecorder remembers the status a handler answered.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// loginData is the sign-in page's.
type loginData struct {
	Next, Problem string
	Certificates  bool // Viewers exists: a client certificate or a bearer token also signs in
}

// login shows the sign-in form (GET) and signs in (POST) with the admin token or a bearer
// token Viewers accepts, setting the session cookie.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	next := r.FormValue("next")
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		next = "/"
	}
	data := loginData{Next: next, Certificates: d.cfg.Viewers != nil}
	if r.Method == http.MethodPost {
		tok := strings.TrimSpace(r.FormValue("token"))
		id, err := "", fmt.Errorf("the token is neither the admin token nor one this console accepts")
		if d.isAdminToken(tok) {
			id, err = adminViewer, nil
		} else if d.cfg.Viewers != nil && tok != "" {
			probe := r.Clone(r.Context())
			probe.TLS = nil // the token alone: not the connection's certificate
			probe.Header = http.Header{"Authorization": {"Bearer " + tok}}
			if id, err = d.cfg.Viewers.Identify(probe); err == nil && id == "" {
				err = fmt.Errorf("the token names no identity")
			}
		}
		if err == nil {
			http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: d.newSession(id), Path: "/", HttpOnly: true, Secure: r.TLS != nil,
				SameSite: http.SameSiteStrictMode, MaxAge: int(d.cfg.SessionTTL / time.Second)})
			d.cfg.Logger.Info("console sign-in", slog.String("identity", id), slog.String("remote", r.RemoteAddr))
			http.Redirect(w, r, next, http.StatusSeeOther)
			return
		}
		d.cfg.Logger.Warn("console sign-in refused", slog.String("remote", r.RemoteAddr), slog.Any("error", err))
		data.Problem = err.Error()
		w.WriteHeader(http.StatusUnauthorized)
	}
	d.render(w, r, "login", "Sign in", data, nil)
}

// logout ends the sign-in: the session itself, not only the cookie.
func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		d.endSession(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// sessions are the console's sign-ins, held by the server: a cookie carries a random id
// and nothing else, so that logout ends a session at once, and a rotated admin token ends
// every session it signed. A restart signs everyone out.
type sessions struct {
	mu   sync.Mutex
	byID map[string]session
}

// session is one sign-in: who, until when, and — signed in with the admin token — which
// token (its generation: SetAdminToken moves it).
type session struct {
	identity string
	until    time.Time
	adminGen uint64
}

// maxSessions bounds the sessions held: past it the one ending first goes.
const maxSessions = 10_000

// newSession starts a session of identity until the session TTL and returns its cookie value.
func (d *Dashboard) newSession(identity string) string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand)
	id := base64.RawURLEncoding.EncodeToString(b)
	now := d.cfg.Now()
	d.sessions.mu.Lock()
	defer d.sessions.mu.Unlock()
	if d.sessions.byID == nil {
		d.sessions.byID = map[string]session{}
	}
	if len(d.sessions.byID) >= maxSessions {
		var first string
		for k, s := range d.sessions.byID {
			if !now.Before(s.until) {
				delete(d.sessions.byID, k)
				continue
			}
			if first == "" || s.until.Before(d.sessions.byID[first].until) {
				first = k
			}
		}
		if len(d.sessions.byID) >= maxSessions {
			delete(d.sessions.byID, first)
		}
	}
	d.sessions.byID[id] = session{identity: identity, until: now.Add(d.cfg.SessionTTL), adminGen: d.adminGen.Load()}
	return id
}

// openSession returns the identity of a live session: unexpired, not ended, and — signed in
// with the admin token — signed with the token in force.
func (d *Dashboard) openSession(value string) (string, bool) {
	d.sessions.mu.Lock()
	defer d.sessions.mu.Unlock()
	s, ok := d.sessions.byID[value]
	switch {
	case !ok:
		return "", false
	case !d.cfg.Now().Before(s.until) || (s.identity == adminViewer && s.adminGen != d.adminGen.Load()):
		delete(d.sessions.byID, value)
		return "", false
	}
	return s.identity, true
}

// endSession ends the session of a cookie value (logout).
func (d *Dashboard) endSession(value string) {
	d.sessions.mu.Lock()
	delete(d.sessions.byID, value)
	d.sessions.mu.Unlock()
}

// SetAdminToken replaces the admin token (the token file was read again): a new token ends
// every session the old one signed. An empty token signs nobody in.
func (d *Dashboard) SetAdminToken(tok string) {
	tok = strings.TrimSpace(tok)
	if old := d.adminToken.Load(); old != nil && *old == tok {
		return
	}
	d.adminToken.Store(&tok)
	d.adminGen.Add(1)
}

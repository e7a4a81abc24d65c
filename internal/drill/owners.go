package drill

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/meshflows/meshflows/internal/notify"
)

// portWebhook is where the drill's owner webhook listens (after the proxies).
const portWebhook = 28

// drillSecret signs the owner notifications the drill receives.
const drillSecret = "meshflows-drill-owner-webhook-secret"

// told is one owner notification the drill's webhook received.
type told struct {
	At     time.Time
	Notice notify.Notice
	Signed bool // the signature verified with the owners file's secret
}

// webhook is the owners' webhook of the drill's deployment: every provider identity's
// notifications come here, and are kept.
type webhook struct {
	srv *http.Server
	mu  sync.Mutex
	got []told
}

// startWebhook writes the owners file the registry is given and starts the webhook it names.
func (s *Stack) startWebhook() (string, error) {
	dir := s.dir
	if err := os.WriteFile(filepath.Join(dir, "owners.secret"), []byte(drillSecret), 0o600); err != nil {
		return "", err
	}
	url := "http://" + s.addr(portWebhook) + "/owners"
	owners := "# the drill's owners: both provider identities, one webhook\nowners:\n"
	for _, id := range []string{"egress-jms", "egress-rabbitmq"} {
		owners += "  " + id + ":\n    url: " + url + "\n    secret_file: owners.secret\n"
	}
	path := filepath.Join(dir, "owners.yaml")
	if err := os.WriteFile(path, []byte(owners), 0o600); err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", s.addr(portWebhook))
	if err != nil {
		return "", err
	}
	w := &webhook{}
	w.srv = &http.Server{Handler: w, ReadHeaderTimeout: 5 * time.Second}
	s.hook = w
	s.proxyWG.Go(func() {
		if err := w.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return
		}
	})
	s.proxyWG.Go(func() {
		<-s.proxyCtx.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = w.srv.Shutdown(ctx)
	})
	return path, nil
}

func (w *webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	var n notify.Notice
	if err != nil || json.Unmarshal(body, &n) != nil {
		http.Error(rw, "not a notification", http.StatusBadRequest)
		return
	}
	signed := notify.Verify([]byte(drillSecret), r.Header.Get(notify.HeaderTimestamp), body, r.Header.Get(notify.HeaderSignature))
	w.mu.Lock()
	w.got = append(w.got, told{At: time.Now(), Notice: n, Signed: signed})
	w.mu.Unlock()
	rw.WriteHeader(http.StatusNoContent)
}

// since returns the notifications about instance id with cause received from t0 on.
func (w *webhook) since(t0 time.Time, id, cause string) []told {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []told
	for _, t := range w.got {
		if !t.At.Before(t0) && t.Notice.InstanceID == id && t.Notice.Cause == cause {
			out = append(out, t)
		}
	}
	return out
}

package notify

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Fallback is the owners-file entry that receives the notifications of owners it does not
// list.
const Fallback = "*"

// Webhook is where one owner's notifications go.
type Webhook struct {
	// URL receives a POST of each notification (https, or http to a loopback address).
	URL string `yaml:"url"`
	// SecretFile holds the HMAC-SHA256 key that signs each body (X-MeshFlows-Signature);
	// relative to the owners file. Optional.
	SecretFile string `yaml:"secret_file"`

	secret []byte
}

// Owners maps owners (teams, or the identities that register) to their webhooks.
type Owners struct {
	hooks map[string]Webhook
}

// ownersFile is the file's shape.
type ownersFile struct {
	Owners map[string]Webhook `yaml:"owners"`
}

// LoadOwners reads an owners file:
//
//	owners:
//	  team-messaging:
//	    url: https://hooks.example.com/meshflows
//	    secret_file: messaging.secret
//	  "*":
//	    url: https://oncall.example.com/meshflows
//
// Every problem is named at once; unknown fields are refused.
func LoadOwners(path string) (*Owners, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("owners file: %w", err)
	}
	var f ownersFile
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("owners file %s: %w", path, err)
	}
	var problems []string
	names := make([]string, 0, len(f.Owners))
	for name := range f.Owners {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		h := f.Owners[name]
		if msg := urlProblem(h.URL); msg != "" {
			problems = append(problems, fmt.Sprintf("owners.%s.url: %s", name, msg))
		}
		if h.SecretFile != "" {
			p := h.SecretFile
			if !filepath.IsAbs(p) {
				p = filepath.Join(filepath.Dir(path), p)
			}
			secret, err := os.ReadFile(p)
			switch {
			case err != nil:
				problems = append(problems, fmt.Sprintf("owners.%s.secret_file: %v", name, err))
			case len(bytes.TrimSpace(secret)) < 16:
				problems = append(problems, fmt.Sprintf("owners.%s.secret_file: %s holds fewer than 16 bytes: too short to sign with", name, p))
			default:
				h.secret = bytes.TrimSpace(secret)
			}
		}
		f.Owners[name] = h
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("owners file %s: %s", path, strings.Join(problems, "; "))
	}
	return &Owners{hooks: f.Owners}, nil
}

// urlProblem says what is wrong with a webhook URL ("" when nothing): https, or http to a
// loopback host (a local relay, a test).
func urlProblem(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		return "missing"
	case err != nil:
		return err.Error()
	case u.Scheme == "https" && u.Host != "":
		return ""
	case u.Scheme == "http" && (u.Hostname() == "localhost" || strings.HasPrefix(u.Hostname(), "127.") || u.Hostname() == "::1"):
		return ""
	default:
		return fmt.Sprintf("%q: want an https URL (http only to a loopback address)", raw)
	}
}

// Webhook returns owner's webhook, or the fallback's; false when neither exists.
func (o *Owners) Webhook(owner string) (Webhook, bool) {
	if o == nil {
		return Webhook{}, false
	}
	if h, ok := o.hooks[owner]; ok {
		return h, true
	}
	h, ok := o.hooks[Fallback]
	return h, ok
}

// Len returns how many owners the file lists.
func (o *Owners) Len() int {
	if o == nil {
		return 0
	}
	return len(o.hooks)
}

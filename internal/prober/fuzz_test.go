package prober

import (
	"encoding/json"
	"testing"
)

// FuzzAnsweredAs: a health answer is whatever the endpoint sends; reading the instance it
// names never panics, and names one only when the answer is a JSON object that does.
func FuzzAnsweredAs(f *testing.F) {
	for _, s := range []string{`{"status":"ok","instance_id":"a"}`, `{"instance_id":1}`, `ok`, `{`, ``, `{"instance_id":"\u0000"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		id := answeredAs(body)
		if id == "" {
			return
		}
		var named struct {
			InstanceID string `json:"instance_id"`
		}
		if err := json.Unmarshal(body, &named); err != nil || named.InstanceID != id {
			t.Errorf("%q: named %q, but it decodes to %q (%v)", body, id, named.InstanceID, err)
		}
	})
}

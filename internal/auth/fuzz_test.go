package auth_test

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/auth"
)

// FuzzParsePolicy: any document either is refused or yields a policy whose checks run.
func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte(policyYAML))
	f.Add([]byte("identities:\n  a: [r]\nroles:\n  r: {capabilities: ['**'], path_prefixes: ['/']}\n"))
	f.Add([]byte("roles: {r: {capabilities: ['a.**.b', '[']}}"))
	req := &apiv1.RegisterRequest{InstanceID: "a-1", ServiceName: "a", Capabilities: []apiv1.Capability{{CapabilityID: "a.b.c"}},
		Manifest: &apiv1.Manifest{Routes: []apiv1.ManifestRoute{{Path: "/a/{b}/{c...}"}, {Path: "/"}}}}
	f.Fuzz(func(t *testing.T, doc []byte) {
		p, err := auth.ParsePolicy(doc)
		if err != nil {
			return
		}
		for id := range p.Identities {
			p.CanRegister(id, req)
			p.CanDiscover(id)
			p.PathPrefixes(id)
		}
	})
}

// FuzzJWTVerify: no token that the fuzzer makes up is accepted, and none panics the parser.
func FuzzJWTVerify(f *testing.F) {
	k := newKeys(f)
	v, err := auth.NewJWTVerifier(auth.JWTConfig{KeysFile: pemFile(f, k.rsa.Public(), k.ec.Public(), k.ed.Public()), Now: func() time.Time { return now }})
	if err != nil {
		f.Fatal(err)
	}
	good := sign(f, jwt.SigningMethodES256, k.ec, "", jwt.MapClaims{"sub": "x", "exp": now.Add(time.Hour).Unix()})
	f.Add(good + "x")
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.")
	f.Add("..")
	f.Fuzz(func(t *testing.T, token string) {
		if token == good {
			return
		}
		if sub, err := v.Verify(token); err == nil {
			t.Fatalf("made-up token %q accepted as %q", token, sub)
		}
	})
}

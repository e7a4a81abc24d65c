package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// JWTConfig configures a JWTVerifier.
type JWTConfig struct {
	// KeysFile is a PEM file of public keys (or certificates) or a JWKS JSON file.
	KeysFile string
	// Audience, when set, must be in the token's aud.
	Audience string
	// Issuer, when set, must equal the token's iss.
	Issuer string
	// Leeway tolerates clock skew on exp and nbf (default 30 s).
	Leeway time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// JWTVerifier checks bearer tokens: RS256, ES256 or EdDSA signatures by one of its keys,
// exp required, nbf and aud checked; sub is the identity.
type JWTVerifier struct {
	cfg  JWTConfig
	keys []verifyKey
}

type verifyKey struct {
	kid string
	key crypto.PublicKey
}

// NewJWTVerifier loads the keys of cfg.KeysFile.
func NewJWTVerifier(cfg JWTConfig) (*JWTVerifier, error) {
	if cfg.Leeway == 0 {
		cfg.Leeway = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	data, err := os.ReadFile(cfg.KeysFile)
	if err != nil {
		return nil, fmt.Errorf("jwt keys: %w", err)
	}
	keys, err := parseVerifyKeys(data)
	if err != nil {
		return nil, fmt.Errorf("jwt keys %s: %w", cfg.KeysFile, err)
	}
	return &JWTVerifier{cfg: cfg, keys: keys}, nil
}

// parseVerifyKeys reads public keys from PEM (PUBLIC KEY or CERTIFICATE blocks) or JWKS.
func parseVerifyKeys(data []byte) ([]verifyKey, error) {
	if trimmed := strings.TrimSpace(string(data)); strings.HasPrefix(trimmed, "{") {
		return parseJWKS(data)
	}
	var keys []verifyKey
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		switch block.Type {
		case "PUBLIC KEY":
			k, err := x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				return nil, err
			}
			keys = append(keys, verifyKey{key: k})
		case "CERTIFICATE":
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, err
			}
			keys = append(keys, verifyKey{key: c.PublicKey})
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("no PUBLIC KEY or CERTIFICATE block and not a JWKS document")
	}
	for _, k := range keys {
		if err := supported(k.key); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

func supported(k crypto.PublicKey) error {
	switch k.(type) {
	case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
		return nil
	}
	return fmt.Errorf("unsupported key type %T (want RSA, ECDSA P-256 or Ed25519)", k)
}

func parseJWKS(data []byte) ([]verifyKey, error) {
	var doc struct {
		Keys []struct {
			Kty, Kid, Crv, N, E, X, Y, Use string
		} `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	b64 := func(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "=")) }
	var keys []verifyKey
	for i, k := range doc.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		var pub crypto.PublicKey
		switch {
		case k.Kty == "RSA":
			n, err1 := b64(k.N)
			e, err2 := b64(k.E)
			if err1 != nil || err2 != nil || len(n) == 0 || len(e) == 0 || len(e) > 4 {
				return nil, fmt.Errorf("jwks key %d: bad RSA n or e", i)
			}
			pub = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		case k.Kty == "EC" && k.Crv == "P-256":
			x, err1 := b64(k.X)
			y, err2 := b64(k.Y)
			if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
				return nil, fmt.Errorf("jwks key %d: bad P-256 x or y", i)
			}
			raw := append([]byte{4}, append(x, y...)...)
			ec, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), raw)
			if err != nil {
				return nil, fmt.Errorf("jwks key %d: %w", i, err)
			}
			pub = ec
		case k.Kty == "OKP" && k.Crv == "Ed25519":
			x, err := b64(k.X)
			if err != nil || len(x) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("jwks key %d: bad Ed25519 x", i)
			}
			pub = ed25519.PublicKey(x)
		default:
			return nil, fmt.Errorf("jwks key %d: unsupported kty %q crv %q", i, k.Kty, k.Crv)
		}
		keys = append(keys, verifyKey{kid: k.Kid, key: pub})
	}
	if len(keys) == 0 {
		return nil, errors.New("jwks: no signing keys")
	}
	return keys, nil
}

// Verify checks a token and returns its subject.
func (v *JWTVerifier) Verify(token string) (string, error) {
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{"RS256", "ES256", "EdDSA"}),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(v.cfg.Leeway),
		jwt.WithTimeFunc(v.cfg.Now),
	}
	if v.cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(v.cfg.Audience))
	}
	if v.cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(v.cfg.Issuer))
	}
	claims := &jwt.RegisteredClaims{}
	_, err := jwt.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		for _, k := range v.keys {
			if kid != "" && k.kid != "" && kid != k.kid {
				continue
			}
			if keyFits(t.Method, k.key) {
				return k.key, nil
			}
		}
		return nil, fmt.Errorf("no key for alg %v kid %q", t.Header["alg"], kid)
	}, opts...)
	if err != nil {
		return "", fmt.Errorf("%w: bearer token: %v", ErrUnauthenticated, err)
	}
	if claims.Subject == "" {
		return "", fmt.Errorf("%w: bearer token has no sub", ErrUnauthenticated)
	}
	return claims.Subject, nil
}

func keyFits(m jwt.SigningMethod, k crypto.PublicKey) bool {
	switch k.(type) {
	case *rsa.PublicKey:
		return m.Alg() == "RS256"
	case *ecdsa.PublicKey:
		return m.Alg() == "ES256"
	case ed25519.PublicKey:
		return m.Alg() == "EdDSA"
	}
	return false
}

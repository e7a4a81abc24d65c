package auth

import (
	"crypto/x509"
	"fmt"
	"os"
)

// LoadPool reads a PEM bundle of CA certificates.
func LoadPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", file)
	}
	return pool, nil
}

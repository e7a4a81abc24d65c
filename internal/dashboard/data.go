package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/routing"
)

// source fetches JSON from one component.
type source struct {
	base   string
	client *http.Client
}

func (s source) get(ctx context.Context, path string, out any) error {
	return s.do(ctx, http.MethodGet, path, nil, "", out)
}

func (s source) do(ctx context.Context, method, path string, body []byte, contentType string, out any) error {
	if s.base == "" {
		return fmt.Errorf("not configured")
	}
	ctx, cancel := context.WithTimeout(ctx, 35*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(s.base, "/")+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusUnprocessableEntity {
		return apiv1.ErrorFromResponse(resp.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// gatewayRoutes is the gateway's /v1/gateway/routes answer: the canonical table (the
// routing package's types) and where it came from.
type gatewayRoutes struct {
	routing.Canonical
	Source           string            `json:"source"`
	AgeSeconds       int64             `json:"age_seconds"`
	RegistryRevision int64             `json:"registry_revision"`
	Reasons          map[string]string `json:"rejection_reasons"`
	// Summary is set when the gateway showed only a summary: the dashboard's identity lacks
	// the gateway_admin permission; FullTable says why.
	Summary    bool   `json:"summary"`
	RouteCount int    `json:"route_count"`
	FullTable  string `json:"full_table"`
}

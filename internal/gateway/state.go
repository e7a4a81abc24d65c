package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/statefile"
)

// stateFile is the name of the saved routes view in Config.StateDir.
const stateFile = "gateway-routes.json"

// savedRoutes is the routes view as the gateway keeps it on disk.
type savedRoutes struct {
	SavedAt       time.Time             `json:"saved_at"`
	RegistryEpoch string                `json:"registry_epoch"`
	Revision      int64                 `json:"revision"`
	Complete      bool                  `json:"complete"`
	Manifests     []apiv1.ManifestEntry `json:"manifests"`
	PublicPaths   []apiv1.PublicPath    `json:"public_paths"`
}

// saveRoutes writes r to the state dir atomically.
func (g *Gateway) saveRoutes(r *discovery.RoutesResult) error {
	return statefile.WriteJSON(filepath.Join(g.cfg.StateDir, stateFile), savedRoutes{SavedAt: g.cfg.Now().UTC(),
		RegistryEpoch: r.RegistryEpoch, Revision: r.Revision, Complete: r.Complete, Manifests: r.Manifests, PublicPaths: r.PublicPaths})
}

// loadRoutes reads the saved routes view; a missing file is (nil, nil).
func (g *Gateway) loadRoutes() (*discovery.RoutesResult, time.Time, error) {
	raw, err := os.ReadFile(filepath.Join(g.cfg.StateDir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, time.Time{}, nil
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	var s savedRoutes
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, time.Time{}, fmt.Errorf("%s: %w", stateFile, err)
	}
	if s.RegistryEpoch == "" || s.SavedAt.IsZero() {
		return nil, time.Time{}, fmt.Errorf("%s: no registry epoch or time saved", stateFile)
	}
	return &discovery.RoutesResult{
		Meta:   discovery.Meta{Source: discovery.SourceSnapshot, State: discovery.StateStale, RegistryEpoch: s.RegistryEpoch, Revision: s.Revision, Complete: s.Complete},
		Routes: discovery.Routes{Manifests: s.Manifests, PublicPaths: s.PublicPaths},
	}, s.SavedAt, nil
}

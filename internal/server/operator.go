package server

import (
	"net/http"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
)

// operatorRoutes are the operator actions (admin only): evacuations and overrides.
func (s *Server) operatorRoutes() {
	s.handle("POST "+apiv1.PathEvacuations, admin, s.createEvacuation)
	s.handle("GET "+apiv1.PathEvacuations, admin, func(http.ResponseWriter, *http.Request) (any, error) { return s.reg.Evacuations() })
	s.handle("GET "+apiv1.PathEvacuations+"/{id}", admin, func(_ http.ResponseWriter, r *http.Request) (any, error) {
		return s.reg.Evacuation(r.PathValue("id"))
	})
	s.handle("PATCH "+apiv1.PathEvacuations+"/{id}", admin, s.extendEvacuation)
	s.handle("DELETE "+apiv1.PathEvacuations+"/{id}", admin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		ev, err := s.reg.EndEvacuation(r.Context(), r.PathValue("id"))
		return ev, err
	})
	s.handle("POST "+apiv1.PathOverrides, admin, s.createOverride)
	s.handle("GET "+apiv1.PathOverrides, admin, func(http.ResponseWriter, *http.Request) (any, error) { return s.reg.Overrides(), nil })
	s.handle("DELETE "+apiv1.PathOverrides+"/{id}", admin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		ov, err := s.reg.EndOverride(r.Context(), r.PathValue("id"))
		return ov, err
	})
}

func (s *Server) createEvacuation(w http.ResponseWriter, r *http.Request) (any, error) {
	var req apiv1.EvacuationRequest
	if err := s.decodeStrict(w, r, &req); err != nil {
		return nil, err
	}
	ev, err := s.reg.Evacuate(r.Context(), &req)
	if err != nil {
		return nil, err
	}
	httpapi.WriteJSON(w, http.StatusCreated, ev)
	return written{}, nil
}

func (s *Server) extendEvacuation(w http.ResponseWriter, r *http.Request) (any, error) {
	var req apiv1.ExtendRequest
	if err := s.decodeStrict(w, r, &req); err != nil {
		return nil, err
	}
	ev, err := s.reg.ExtendEvacuation(r.Context(), r.PathValue("id"), &req)
	return ev, err
}

func (s *Server) createOverride(w http.ResponseWriter, r *http.Request) (any, error) {
	var req apiv1.OverrideRequest
	if err := s.decodeStrict(w, r, &req); err != nil {
		return nil, err
	}
	ov, err := s.reg.Override(r.Context(), &req)
	if err != nil {
		return nil, err
	}
	httpapi.WriteJSON(w, http.StatusCreated, ov)
	return written{}, nil
}

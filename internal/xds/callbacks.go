package xds

import (
	"context"
	"fmt"
	"log/slog"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
)

// callbacks log what clients do on their streams (NACKs with the error they gave, and
// streams opening and closing), and note what they subscribe to (interest.go).
func (s *Server) callbacks() serverv3.CallbackFuncs {
	logger := s.cfg.Logger
	return serverv3.CallbackFuncs{
		StreamOpenFunc: func(_ context.Context, id int64, typ string) error {
			logger.Debug("xds stream open", slog.Int64("stream", id), slog.String("type", typ))
			return nil
		},
		StreamClosedFunc: func(id int64, node *corev3.Node) {
			s.interest.end(stream{id: id})
			logger.Debug("xds stream closed", slog.Int64("stream", id), slog.String("node", node.GetId()))
		},
		DeltaStreamClosedFunc: func(id int64, node *corev3.Node) {
			s.interest.end(stream{delta: true, id: id})
			logger.Debug("xds stream closed", slog.Int64("stream", id), slog.String("node", node.GetId()))
		},
		StreamRequestFunc: func(id int64, req *discoveryv3.DiscoveryRequest) error {
			if st := req.GetErrorDetail(); st != nil {
				logger.Warn("xds NACK: a client refused a version", slog.Int64("stream", id), slog.String("type", req.GetTypeUrl()),
					slog.String("accepted_version", req.GetVersionInfo()), slog.String("nonce", req.GetResponseNonce()), slog.String("node", req.GetNode().GetId()), slog.String("error", st.GetMessage()))
			}
			s.onRequest(id, req)
			return nil
		},
		StreamDeltaRequestFunc: func(id int64, req *discoveryv3.DeltaDiscoveryRequest) error {
			if st := req.GetErrorDetail(); st != nil {
				logger.Warn("xds NACK: a client refused a version", slog.Int64("stream", id), slog.String("type", req.GetTypeUrl()),
					slog.String("nonce", req.GetResponseNonce()), slog.String("node", req.GetNode().GetId()), slog.String("error", st.GetMessage()))
			}
			s.onDeltaRequest(id, req)
			return nil
		},
	}
}

// cacheLogger hands the snapshot cache's messages to slog: its debug and info lines at debug
// level (its info lines are per watch, that is per request and ACK of every stream).
type cacheLogger struct{ l *slog.Logger }

func (c cacheLogger) Debugf(format string, args ...any) {
	c.l.Debug("xds cache: " + fmt.Sprintf(format, args...))
}
func (c cacheLogger) Infof(format string, args ...any) {
	c.l.Debug("xds cache: " + fmt.Sprintf(format, args...))
}
func (c cacheLogger) Warnf(format string, args ...any) {
	c.l.Warn("xds cache: " + fmt.Sprintf(format, args...))
}
func (c cacheLogger) Errorf(format string, args ...any) {
	c.l.Error("xds cache: " + fmt.Sprintf(format, args...))
}

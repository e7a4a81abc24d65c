package server

import (
	"net/http"
	"strconv"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/apijson"
)

// The heartbeat is the registry's most frequent request, and its body and answer are tiny:
// encoding/json's reflection was a third of the handler's time. The usual forms are read and
// written here directly; anything else goes through encoding/json as before, so the
// accepted input, the errors and the bytes of the answer are the same either way
// (FuzzParseHeartbeat and FuzzAppendHeartbeatAnswer hold both paths to that).

// parseHeartbeat reads the usual heartbeat bodies — {"generation": N} with or without
// "health": "<word>", in either order, with any JSON whitespace — into req. It reports false,
// leaving req as it was, for anything else (another field, a key in other case, an escape,
// a number in another form, a repeated key), which encoding/json then reads.
func parseHeartbeat(b []byte, req *apiv1.HeartbeatRequest) bool {
	var (
		gen                 int64
		health              string
		seenGen, seenHealth bool
	)
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	for {
		i = skipSpace(b, i+1)
		if i >= len(b) || b[i] != '"' {
			return false
		}
		j := i + 1
		for j < len(b) && (b[j] >= 'a' && b[j] <= 'z' || b[j] == '_') {
			j++
		}
		if j >= len(b) || b[j] != '"' {
			return false
		}
		key := b[i+1 : j]
		i = skipSpace(b, j+1)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		switch {
		case string(key) == "generation" && !seenGen: // a conversion in a comparison does not allocate
			j = i
			for j < len(b) && b[j] >= '0' && b[j] <= '9' && j-i < 18 {
				j++
			}
			if j == i || (b[i] == '0' && j-i > 1) || (j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '.' || b[j] == 'e' || b[j] == 'E')) {
				return false
			}
			n, err := strconv.ParseInt(string(b[i:j]), 10, 64)
			if err != nil {
				return false
			}
			gen, seenGen, i = n, true, j
		case string(key) == "health" && !seenHealth:
			if i >= len(b) || b[i] != '"' {
				return false
			}
			j = i + 1
			for j < len(b) && b[j] >= 'a' && b[j] <= 'z' && j-i <= 16 {
				j++
			}
			if j >= len(b) || b[j] != '"' {
				return false
			}
			health, seenHealth, i = healthWord(b[i+1:j]), true, j+1
		default:
			return false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		if b[i] == '}' {
			break
		}
		if b[i] != ',' {
			return false
		}
	}
	if skipSpace(b, i+1) != len(b) {
		return false
	}
	if seenGen {
		req.Generation = gen
	}
	if seenHealth {
		req.Health = health
	}
	return true
}

// healthWord returns w as a string, the constant itself for the three valid values.
func healthWord(w []byte) string {
	switch string(w) {
	case apiv1.HealthOK:
		return apiv1.HealthOK
	case apiv1.HealthDegraded:
		return apiv1.HealthDegraded
	case apiv1.HealthFailing:
		return apiv1.HealthFailing
	}
	return string(w)
}

// skipSpace returns the index of the first byte at or after i that is not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// appendHeartbeatAnswer appends resp as httpapi.Marshal encodes it (one line of JSON and a
// newline), or reports false when resp holds what only encoding/json writes correctly: a
// year outside 0–9999, a zone offset in seconds, or an epoch that needs escaping.
func appendHeartbeatAnswer(dst []byte, resp *apiv1.HeartbeatResponse) ([]byte, bool) {
	if !apijson.Plain(resp.RegistryEpoch) {
		return dst, false
	}
	start := len(dst)
	dst = append(dst, `{"generation":`...)
	dst = strconv.AppendInt(dst, resp.Generation, 10)
	dst = append(dst, `,"lease_expires_at":`...)
	dst, ok := apijson.TimeFast(dst, resp.LeaseExpiresAt)
	if !ok {
		return dst[:start], false
	}
	dst = append(dst, `,"registry_epoch":"`...)
	dst = append(dst, resp.RegistryEpoch...)
	return append(dst, "\"}\n"...), true
}

// heartbeat renews an instance's lease: PUT /v1/services/{instance_id}/heartbeat.
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) (any, error) {
	body, err := s.readBody(w, r)
	if err != nil {
		return nil, err
	}
	var req apiv1.HeartbeatRequest
	if !parseHeartbeat(body, &req) {
		if err := decodeJSON(body, &req); err != nil {
			return nil, err
		}
	}
	resp, err := s.reg.Heartbeat(r.Context(), r.PathValue("instance_id"), &req)
	if err != nil {
		return nil, err
	}
	out, ok := appendHeartbeatAnswer(make([]byte, 0, 160), &resp)
	if !ok {
		return resp, nil
	}
	return answerJSON(out), nil
}

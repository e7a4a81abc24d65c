package auth

import (
	"io"
	"strconv"
	"sync"
	"time"
)

// AuditEntry is one audited request.
type AuditEntry struct {
	Time       time.Time
	Identity   string
	Method     string
	Path       string
	InstanceID string
	Status     int
	Latency    time.Duration
	Remote     string
}

// AuditLog writes one JSON line per request. Lines are appended to a buffer under a mutex
// and written out in batches by the owner of the writer (telemetry.BufferedWriter flushes
// every 100 ms and at exit), so the heartbeat path pays for formatting, not for a write
// call; no line is ever dropped: a full buffer is written through.
type AuditLog struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewAuditLog returns an audit log writing to w.
func NewAuditLog(w io.Writer) *AuditLog { return &AuditLog{w: w, buf: make([]byte, 0, 512)} }

// Record writes e as one JSON line:
// {"time","identity","method","path","instance_id","status","latency_ms","remote"}.
func (a *AuditLog) Record(e AuditEntry) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.buf[:0]
	b = append(b, `{"time":"`...)
	b = e.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","identity":`...)
	b = strconv.AppendQuote(b, e.Identity)
	b = append(b, `,"method":`...)
	b = strconv.AppendQuote(b, e.Method)
	b = append(b, `,"path":`...)
	b = strconv.AppendQuote(b, e.Path)
	if e.InstanceID != "" {
		b = append(b, `,"instance_id":`...)
		b = strconv.AppendQuote(b, e.InstanceID)
	}
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, `,"latency_ms":`...)
	b = strconv.AppendFloat(b, float64(e.Latency.Microseconds())/1000, 'f', 3, 64)
	if e.Remote != "" {
		b = append(b, `,"remote":`...)
		b = strconv.AppendQuote(b, e.Remote)
	}
	b = append(b, "}\n"...)
	a.buf = b
	_, err := a.w.Write(b)
	return err
}

package httpapi

import "net/http"

// StatusWriter remembers the status a handler answered with (200 for a body written without
// WriteHeader; 0 for nothing written yet).
type StatusWriter struct {
	http.ResponseWriter
	Status int
}

// WriteHeader records code and writes it.
func (w *StatusWriter) WriteHeader(code int) {
	if w.Status == 0 {
		w.Status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write records 200 when nothing was written before.
func (w *StatusWriter) Write(b []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flushes, deadlines).
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

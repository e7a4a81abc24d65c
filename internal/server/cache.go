package server

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/registry"
)

// The answer cache's bounds: past either it starts over. An unfiltered answer at 100,000
// instances is about 37 MB; the byte bound keeps a few of them, not thousands. It counts the
// answers as encoded, and their keys (a query naming a service of a megabyte has a small
// answer and a key of a megabyte); a gzip copy kept beside an answer is smaller than it
// (about a twentieth).
const (
	maxCachedAnswers = 4096
	maxCachedBytes   = 256 << 20
)

// encoded is a discovery answer encoded once for one (query, epoch, revision, complete).
type encoded struct {
	state    registry.State
	etag     string
	weakETag string // the ETag of the compressed answer
	revision string // X-Registry-Revision
	size     int    // of the body

	// body is the answer as JSON. An answer built compressed first (zippedAnswer) has none
	// until a client that does not accept gzip asks: identity then writes it, once.
	body     []byte
	bodyOnce sync.Once
	identity func() []byte

	gzipOnce sync.Once
	gz       []byte // body gzip-compressed, made for the first client that accepts it; nil when not smaller

	// builtAt is when the answer was built, took how long that took (zero for an answer not
	// built by answerCache.load): how long a long poll for the next one is held (spacing).
	builtAt time.Time
	took    time.Duration
}

func newEncoded(st registry.State, v any) (*encoded, error) {
	body, err := httpapi.Marshal(v) // as every answer: no HTML escaping, newline-terminated
	if err != nil {
		return nil, err
	}
	return encodedAs(st, body), nil
}

// encodedAs is the answer at st whose encoded body is body.
func encodedAs(st registry.State, body []byte) *encoded {
	etag := st.Epoch + "/" + strconv.FormatInt(st.Revision, 10)
	if !st.Complete {
		// The same revision turns complete when the warm-up ends; a client holding the
		// incomplete answer must not be told 304 then.
		etag += "/incomplete"
	}
	etag = `"` + etag + `"`
	return &encoded{state: st, etag: etag, weakETag: "W/" + etag, revision: strconv.FormatInt(st.Revision, 10), body: body, size: len(body)}
}

// zipped is the answer at st of size bytes built compressed, gz; identity writes its JSON
// when a client asks for that.
func zipped(st registry.State, size int, gz []byte, identity func() []byte) *encoded {
	e := encodedAs(st, nil)
	e.size, e.identity = size, identity
	e.gzipOnce.Do(func() { e.gz = gz }) // compressed already
	return e
}

// json returns the answer as JSON, written now if it was built compressed.
func (e *encoded) json() []byte {
	if e.identity != nil { // set once, when the answer is made: never written after
		e.bodyOnce.Do(func() { e.body = e.identity() })
	}
	return e.body
}

// write answers with the encoded body, or 304 when the client already holds it. A client that
// accepts gzip gets an answer of gzipMin bytes or more (never when gzipMin is negative)
// compressed, once per answer, then kept: the bytes are most of what an answer costs the
// server to write, and over a network most of its time. The compressed answer's ETag is the
// weak form of the same tag (as nginx does), and either form matches If-None-Match.
func (e *encoded) write(w http.ResponseWriter, r *http.Request, gzipMin int64) {
	h := w.Header()
	var body []byte
	etag, zipped := e.etag, false
	if gzipMin >= 0 && int64(e.size) >= gzipMin {
		h.Set("Vary", "Accept-Encoding")
		if acceptsGzip(r.Header.Get("Accept-Encoding")) {
			if gz := e.compressed(); gz != nil {
				body, etag, zipped = gz, e.weakETag, true
			}
		}
	}
	h.Set("ETag", etag)
	h.Set("X-Registry-Revision", e.revision)
	h.Set("Cache-Control", "no-cache")
	if inm := r.Header.Get("If-None-Match"); strings.TrimPrefix(inm, "W/") == e.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if zipped {
		h.Set("Content-Encoding", "gzip")
	} else {
		body = e.json()
	}
	httpapi.WriteEncoded(w, http.StatusOK, body)
}

// gzipWriters reuses compressors: each holds about a megabyte of tables.
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed) // a valid level: no error
	return zw
}}

// compressed returns the body gzip-compressed at the fastest level (76 µs for a 39 KB
// answer, to 2.1 KB), made once; nil when that is not smaller than the body.
func (e *encoded) compressed() []byte {
	e.gzipOnce.Do(func() {
		var buf bytes.Buffer
		buf.Grow(len(e.body) / 8)
		zw := gzipWriters.Get().(*gzip.Writer)
		zw.Reset(&buf)
		_, err := zw.Write(e.body)
		if err == nil {
			err = zw.Close()
		}
		gzipWriters.Put(zw)
		if err == nil && buf.Len() < len(e.body) {
			e.gz = bytes.Clone(buf.Bytes())
		}
	})
	return e.gz
}

// acceptsGzip reports whether an Accept-Encoding header names gzip with a q-value above 0.
func acceptsGzip(accept string) bool {
	for accept != "" {
		var coding string
		coding, accept, _ = strings.Cut(accept, ",")
		name, params, _ := strings.Cut(coding, ";")
		if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
			continue
		}
		for params != "" {
			var p string
			p, params, _ = strings.Cut(params, ";")
			k, v, _ := strings.Cut(p, "=")
			if strings.EqualFold(strings.TrimSpace(k), "q") {
				if q, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && q == 0 {
					return false
				}
			}
		}
		return true
	}
	return false
}

// answerCache holds the latest encoded answer per query: while the revision stands, every
// request for the same query is a map lookup and a write.
type answerCache struct {
	now func() time.Time // when each build ended (encoded.builtAt)
	// cost times each build (encoded.took), by BuildClock or the building thread's CPU
	cost    func(build func()) time.Duration
	mu      sync.RWMutex
	m       map[string]*encoded
	bytes   int                // the sizes of the keys and bodies in m (a key can be long: a query's values)
	flights map[string]*flight // answers being built, per query: later requests join them
}

// flight is one answer being built; the requests that join it get its result.
type flight struct {
	done chan struct{}
	e    *encoded
	err  error
}

func newAnswerCache(now func() time.Time, clock func() time.Duration) *answerCache {
	return &answerCache{now: now, cost: buildCost(now, clock), m: map[string]*encoded{}, flights: map[string]*flight{}}
}

// buildCost returns what times a build: clock when it is set (tests), else the CPU time of
// the thread that builds, the goroutine locked to it meanwhile, so that a build held up on a
// busy machine (waiting for a core, not working) does not count as cost (PollSpacing). Where
// the system has no thread clock, the wall clock now.
func buildCost(now func() time.Time, clock func() time.Duration) func(func()) time.Duration {
	if clock != nil {
		return func(build func()) time.Duration {
			start := clock()
			build()
			return clock() - start
		}
	}
	if _, ok := threadCPU(); !ok {
		return func(build func()) time.Duration {
			start := now()
			build()
			return now().Sub(start)
		}
	}
	return func(build func()) time.Duration {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		start, _ := threadCPU()
		build()
		end, _ := threadCPU()
		return time.Duration(end - start)
	}
}

// load returns the answer to key at st: cached, or built once by build however many requests
// ask at once (8 concurrent cold requests for 100,000 instances each built and held their own
// 37 MB answer).
func (c *answerCache) load(key string, st registry.State, build func() (*encoded, error)) (*encoded, error) {
	if e := c.get(key, st); e != nil {
		return e, nil
	}
	c.mu.Lock()
	if f := c.flights[key]; f != nil {
		c.mu.Unlock()
		<-f.done // building is bounded work, not a wait on anyone
		return f.e, f.err
	}
	f := &flight{done: make(chan struct{})}
	c.flights[key] = f
	c.mu.Unlock()
	took := c.cost(func() { f.e, f.err = build() })
	if f.err == nil {
		f.e.builtAt, f.e.took = c.now(), took
		c.put(key, f.e)
	}
	c.mu.Lock()
	delete(c.flights, key)
	c.mu.Unlock()
	close(f.done)
	return f.e, f.err
}

func (c *answerCache) get(key string, st registry.State) *encoded {
	c.mu.RLock()
	e := c.m[key]
	c.mu.RUnlock()
	if e != nil && e.state == st {
		return e
	}
	return nil
}

// Spacing of long polls (Config.PollSpacing): an answer whose build cost less than
// spacedBuild (of CPU: Config.BuildClock) is never held for, and no hold is longer than
// maxSpacing.
const (
	spacedBuild = time.Millisecond
	maxSpacing  = 5 * time.Second
)

// nextBuild returns when the answer to key may be built anew for a long poll, spacing times
// as long after the last build as that build took (at most maxSpacing), and whether a long
// poll should wait for it: not when the answer at st is cached (nothing to build), when none
// was built before, or when the last took less than spacedBuild.
func (c *answerCache) nextBuild(key string, st registry.State, spacing float64) (time.Time, bool) {
	c.mu.RLock()
	e := c.m[key]
	c.mu.RUnlock()
	if e == nil || e.state == st || e.took < spacedBuild || spacing <= 0 {
		return time.Time{}, false
	}
	return e.builtAt.Add(min(time.Duration(spacing*float64(e.took)), maxSpacing)), true
}

func (c *answerCache) put(key string, e *encoded) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[key]; old != nil && old.state.Epoch == e.state.Epoch && old.state.Revision > e.state.Revision {
		return // a newer answer is already there
	}
	if old := c.m[key]; old != nil {
		c.bytes -= len(key) + old.size
	}
	if len(c.m) >= maxCachedAnswers || c.bytes+len(key)+e.size > maxCachedBytes {
		clear(c.m)
		c.bytes = 0
	}
	c.m[key] = e
	c.bytes += len(key) + e.size
}

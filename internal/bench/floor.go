package bench

// The floor of a run: the registration, heartbeat and discovery exchanges of the registry's
// run, sent again, by the same driver, to two servers that do no work and answer with the
// registry's own answers. One is a net/http server whose handler reads the request and
// writes the answer; the other a minimal HTTP/1.1 responder on raw TCP, the least any HTTP
// server can do. Each runs in a process of its own and is measured as the registry is. Over
// loopback, a server's CPU per operation includes the kernel's work for the connection (the
// reads, the writes, waking the client), which no server avoids: the floor says how much of
// the registry's figure that is, on the machine at hand, in the same run.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Floor servers.
const (
	// FloorHTTP is a net/http server whose handler reads the request's body and writes the
	// canned answer.
	FloorHTTP = "net/http"
	// FloorTCP is a minimal HTTP/1.1 responder on raw TCP: it reads a request's head and
	// body and writes the canned answer, nothing else.
	FloorTCP = "tcp"
)

// FloorKinds are the floor servers a run measures, in order.
var FloorKinds = []string{FloorHTTP, FloorTCP}

// maxFloorBody bounds the body of a request a floor server reads.
const maxFloorBody = 1 << 20

// FloorAnswers are the answers a floor server gives, whatever the path: to a POST (a
// registration), a PUT (a heartbeat) and a GET (a discovery query). They are the registry's
// own answers from the same run, so that the floor writes the same bytes.
type FloorAnswers struct {
	Register  []byte `json:"register"`
	Heartbeat []byte `json:"heartbeat"`
	Discovery []byte `json:"discovery"`
}

// answer returns the answer to a request of method, false for a method it has none for.
func (a *FloorAnswers) answer(method string) ([]byte, bool) {
	switch method {
	case http.MethodPost:
		return a.Register, true
	case http.MethodPut:
		return a.Heartbeat, true
	case http.MethodGet:
		return a.Discovery, true
	}
	return nil, false
}

// FloorReport is one floor server's run.
type FloorReport struct {
	Server string  `json:"server"`
	Phases []Phase `json:"phases"`
}

// ServeFloor serves answers on l as a floor server of kind (FloorHTTP or FloorTCP) until ctx
// ends, then closes l and every connection.
func ServeFloor(ctx context.Context, l net.Listener, kind string, a FloorAnswers) error {
	switch kind {
	case FloorHTTP:
		return serveFloorHTTP(ctx, l, a)
	case FloorTCP:
		return serveFloorTCP(ctx, l, a)
	}
	l.Close()
	return fmt.Errorf("floor server %q: want %s or %s", kind, FloorHTTP, FloorTCP)
}

// RunFloorServer is a floor server's process ('meshflows bench floor-server', which
// FloorCommand starts): it reads its answers as JSON from in, listens on a loopback port,
// writes its URL on a line of out, and serves as kind until ctx ends.
func RunFloorServer(ctx context.Context, kind string, in io.Reader, out io.Writer) error {
	var a FloorAnswers
	if err := json.NewDecoder(io.LimitReader(in, 64<<20)).Decode(&a); err != nil {
		return fmt.Errorf("read the answers on standard input: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(out, "http://%s\n", l.Addr()); err != nil {
		l.Close()
		return err
	}
	return ServeFloor(ctx, l, kind, a)
}

func serveFloorHTTP(ctx context.Context, l net.Listener, a FloorAnswers) error {
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, maxFloorBody)); err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		b, ok := a.answer(r.Method)
		if !ok {
			http.Error(w, "a floor server answers POST, PUT and GET", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		h["Content-Length"] = []string{strconv.Itoa(len(b))}
		w.Write(b)
	})}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	err := srv.Serve(l)
	if stop() { // ended on its own
		srv.Close()
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func serveFloorTCP(ctx context.Context, l net.Listener, a FloorAnswers) error {
	var (
		mu     sync.Mutex
		conns  = map[net.Conn]struct{}{}
		closed bool // conns were closed: one accepted since is closed at once
		wg     sync.WaitGroup
	)
	closeAll := func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		closed = true
		for c := range conns {
			c.Close()
		}
	}
	stop := context.AfterFunc(ctx, closeAll)
	var err error
	for {
		c, aerr := l.Accept()
		if aerr != nil {
			if ctx.Err() == nil {
				err = aerr
			}
			break
		}
		mu.Lock()
		conns[c] = struct{}{}
		if closed {
			c.Close()
		}
		mu.Unlock()
		wg.Go(func() {
			defer func() {
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				c.Close()
			}()
			respondFloor(c, a)
		})
	}
	if stop() { // the listener failed first: close what it accepted
		closeAll()
	}
	wg.Wait()
	return err
}

// respondFloor answers the requests of one connection until it ends or sends something
// a floor server does not read.
func respondFloor(c io.ReadWriter, a FloorAnswers) {
	br := bufio.NewReaderSize(c, 4096)
	var out []byte
	for {
		method, err := readFloorRequest(br)
		if err != nil {
			return
		}
		b, ok := a.answer(method)
		status := "200 OK"
		if !ok {
			status, b = "405 Method Not Allowed", nil
		}
		out = append(out[:0], "HTTP/1.1 "...)
		out = append(out, status...)
		out = append(out, "\r\nContent-Type: application/json\r\nContent-Length: "...)
		out = strconv.AppendInt(out, int64(len(b)), 10)
		out = append(out, "\r\n\r\n"...)
		out = append(out, b...)
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// errFloorRequest is a request a floor server does not read: a line longer than its buffer,
// a chunked body, too many header lines, or a malformed request line or length.
var errFloorRequest = errors.New("a request the floor server does not read")

// readFloorRequest reads one HTTP/1.1 request's head from br and discards its body (of
// Content-Length bytes), returning its method: GET, PUT, POST, or "" for any other.
func readFloorRequest(br *bufio.Reader) (method string, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return "", err
	}
	m, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok || len(m) == 0 || !bytes.HasSuffix(bytes.TrimRight(rest, "\r\n"), []byte(" HTTP/1.1")) {
		return "", errFloorRequest
	}
	switch string(m) { // constants: no allocation
	case http.MethodGet:
		method = http.MethodGet
	case http.MethodPut:
		method = http.MethodPut
	case http.MethodPost:
		method = http.MethodPost
	}
	var length int64
	for n := 0; ; n++ {
		if n == 100 {
			return "", errFloorRequest
		}
		line, err := br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				err = errFloorRequest
			}
			return "", err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		k, v, _ := bytes.Cut(line, []byte(":"))
		switch {
		case strings.EqualFold(string(k), "Content-Length"):
			length, err = strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil || length < 0 || length > maxFloorBody {
				return "", errFloorRequest
			}
		case strings.EqualFold(string(k), "Transfer-Encoding"):
			return "", errFloorRequest
		}
	}
	if _, err := br.Discard(int(length)); err != nil {
		return "", err
	}
	return method, nil
}

// floorServer is a floor server running in a process of its own.
type floorServer struct {
	url  string
	pid  int
	stop func() error
}

// startFloor starts the floor server of kind with command (its last argument the kind),
// handing it answers on its standard input and reading its URL from the first line of its
// standard output.
func startFloor(ctx context.Context, command []string, kind string, a FloorAnswers) (*floorServer, error) {
	in, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	c := exec.CommandContext(ctx, command[0], append(command[1:len(command):len(command)], kind)...)
	c.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	c.Cancel = func() error { return c.Process.Signal(os.Interrupt) }
	c.WaitDelay = 5 * time.Second
	out, err := c.StdoutPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	if err := c.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("start the %s floor server: %w", kind, err)
	}
	first, err := bufio.NewReader(out).ReadString('\n')
	url := strings.TrimSpace(first)
	if err != nil || !strings.HasPrefix(url, "http://") {
		cancel()
		c.Wait()
		return nil, fmt.Errorf("the %s floor server did not start: %q %s", kind, first, strings.TrimSpace(stderr.String()))
	}
	return &floorServer{url: url, pid: c.Process.Pid, stop: func() error {
		cancel() // an interrupt: the server ends with status 0
		var ee *exec.ExitError
		if err := c.Wait(); errors.As(err, &ee) { // else the context's error: it was interrupted
			return fmt.Errorf("the %s floor server: %w: %s", kind, err, strings.TrimSpace(stderr.String()))
		}
		return nil
	}}, nil
}

// runFloors runs the registration, heartbeat and discovery phases of cfg against each floor
// server, answering with a.
func runFloors(ctx context.Context, cfg RegistryConfig, a FloorAnswers) ([]FloorReport, error) {
	if a.Discovery == nil {
		cfg.Queries = 0 // the registry's run asked none
	}
	var reps []FloorReport
	for _, kind := range FloorKinds {
		fs, err := startFloor(ctx, cfg.FloorCommand, kind, a)
		if err != nil {
			return reps, err
		}
		t, err := newRegistryTarget(cfg, fs.url)
		if err != nil {
			fs.stop()
			return reps, err
		}
		d := &driver{cfg: cfg, pid: fs.pid}
		phases, err := d.exchanges(ctx, t, benchInstances(cfg, "f"))
		reps = append(reps, FloorReport{Server: kind, Phases: phases})
		if err = errors.Join(err, fs.stop()); err != nil {
			return reps, fmt.Errorf("the %s floor server: %w", kind, err)
		}
	}
	return reps, nil
}

// FloorTitle says what the floor server kind is, for a report's heading.
func FloorTitle(kind string) string {
	switch kind {
	case FloorHTTP:
		return "a net/http handler that reads the request and writes the answer"
	case FloorTCP:
		return "a minimal HTTP/1.1 responder on raw TCP"
	}
	return kind
}

// WriteFloor prints the registry's CPU per operation beside each floor server's, and the
// registry's over the net/http floor's: how much more than the connection the registry's
// own work costs.
func WriteFloor(w io.Writer, rep *RegistryReport) error {
	if len(rep.Floor) == 0 {
		return errors.New("no floor run in the report")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s %14s", "cpu/op", "registry")
	floors := make([]map[string]Phase, len(rep.Floor))
	for i, f := range rep.Floor {
		fmt.Fprintf(&b, " %14s", f.Server)
		floors[i] = map[string]Phase{}
		for _, p := range f.Phases {
			floors[i][p.Name] = p
		}
	}
	fmt.Fprintf(&b, " %16s\n", "registry/"+rep.Floor[0].Server)
	for _, r := range rep.Phases {
		if _, ok := floors[0][r.Name]; !ok {
			continue
		}
		fmt.Fprintf(&b, "%-12s %14s", r.Name, cpuPerOp(r))
		for _, f := range floors {
			fmt.Fprintf(&b, " %14s", cpuPerOp(f[r.Name]))
		}
		fmt.Fprintf(&b, " %16s\n", ratio(float64(r.ServerCPUPerOp), float64(floors[0][r.Name].ServerCPUPerOp)))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

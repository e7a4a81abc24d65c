package telemetry

import (
	"bufio"
	"context"
	"io"
	"sync"
	"time"
)

// BufferedWriter batches log lines into few writes: a registry logs every registration, and
// one write syscall per line costs a third of its registration throughput. Run flushes it on
// an interval and once more when its context ends; lines written after the last flush of a
// crashing process are lost, the price of the batching.
type BufferedWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

// NewBufferedWriter returns a writer that buffers up to 64 KiB for w.
func NewBufferedWriter(w io.Writer) *BufferedWriter {
	return &BufferedWriter{w: bufio.NewWriterSize(w, 64<<10)}
}

// Write buffers p; a full buffer is written through at once.
func (b *BufferedWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Write(p)
}

// Flush writes out what is buffered.
func (b *BufferedWriter) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Flush()
}

// Run flushes every interval until ctx ends, then flushes a last time.
func (b *BufferedWriter) Run(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return b.Flush()
		case <-t.C:
			if err := b.Flush(); err != nil {
				return err
			}
		}
	}
}

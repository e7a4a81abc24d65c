package telemetry_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/meshflows/meshflows/internal/telemetry"
)

func TestNewLogger(t *testing.T) {
	tests := []struct {
		cfg     telemetry.LogConfig
		wantErr bool
		want    string
	}{
		{telemetry.LogConfig{}, false, `"msg":"hello"`},
		{telemetry.LogConfig{Level: "debug", Format: "json"}, false, `"level":"DEBUG"`},
		{telemetry.LogConfig{Format: "text"}, false, `msg=hello`},
		{telemetry.LogConfig{Level: "loud"}, true, ""},
		{telemetry.LogConfig{Format: "xml"}, true, ""},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		l, err := telemetry.NewLogger(&buf, tt.cfg)
		if (err != nil) != tt.wantErr {
			t.Fatalf("NewLogger(%+v) error = %v, want error %v", tt.cfg, err, tt.wantErr)
		}
		if err != nil {
			continue
		}
		l.Debug("hello")
		l.Info("hello")
		if !strings.Contains(buf.String(), tt.want) {
			t.Errorf("NewLogger(%+v) wrote %q, want it to contain %q", tt.cfg, buf.String(), tt.want)
		}
	}
}

func TestBufferedWriterFlushesWhenRunEnds(t *testing.T) {
	var out bytes.Buffer
	bw := telemetry.NewBufferedWriter(&out)
	bw.Write([]byte("line 1\n"))
	if out.Len() != 0 {
		t.Fatalf("written through before a flush: %q", out.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := bw.Run(ctx, 1<<62); err != nil {
		t.Fatal(err)
	}
	if out.String() != "line 1\n" {
		t.Errorf("after Run ended: %q, want the line", out.String())
	}
}

func TestNewRegistryGathers(t *testing.T) {
	mfs, err := telemetry.NewRegistry().Gather()
	if err != nil || len(mfs) == 0 {
		t.Fatalf("Gather() = %d families, %v", len(mfs), err)
	}
}

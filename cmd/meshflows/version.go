package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set at build time with -ldflags "-X main.version=… -X main.commit=… -X main.buildDate=…"
// (docs/getting-started.md: "Install"); otherwise read from the build information Go records.
var (
	version   = ""
	commit    = ""
	buildDate = ""
)

// buildInfo is what 'meshflows version' prints.
type buildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	BuildDate string `json:"build_date"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// readBuildInfo collects the version, commit and build date from the ldflags and the build
// information Go stamps into the binary (go build in a git checkout records the commit and
// its time; go run and go test do not, and say "unknown").
func readBuildInfo() buildInfo {
	b := buildInfo{Version: version, Commit: "unknown", BuildDate: "unknown", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.time":
				b.BuildDate = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if commit != "" {
		b.Commit = commit
	}
	if buildDate != "" {
		b.BuildDate = buildDate
	}
	if b.Version == "" {
		switch {
		case ok && bi.Main.Version != "" && bi.Main.Version != "(devel)":
			b.Version = bi.Main.Version
		case len(b.Commit) >= 12:
			b.Version = "devel-" + b.Commit[:12]
		default:
			b.Version = "devel"
		}
	}
	return b
}

func buildVersion() string { return readBuildInfo().Version }

func (b buildInfo) text(w io.Writer) error {
	dirty := ""
	if b.Modified {
		dirty = " (with uncommitted changes)"
	}
	_, err := fmt.Fprintf(w, "meshflows %s\ncommit:     %s%s\nbuild date: %s\ngo:         %s %s\n", b.Version, b.Commit, dirty, b.BuildDate, b.GoVersion, b.Platform)
	return err
}

func newVersionCmd() *cobra.Command {
	var out outputFlag
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, build date and Go version of meshflows",
		Long: `Print the version of this binary, the commit it was built from and when, and the Go
version. 'meshflows --version' prints the same. The commit and date come from the build
information Go records when it builds inside a git checkout ('go build ./cmd/meshflows');
'go run' records none. Stamp a release version with
-ldflags "-X main.version=v1.2.3".`,
		Example: "  meshflows version\n  meshflows version -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check("text", "json", "yaml"); err != nil {
				return err
			}
			b := readBuildInfo()
			if out.value == "" || out.value == "text" {
				return b.text(cmd.OutOrStdout())
			}
			return out.write(cmd.OutOrStdout(), b)
		},
	}
	out.bind(cmd, "text")
	return cmd
}

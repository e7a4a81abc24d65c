package dashboard

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/meshflows/meshflows/docs"
)

func TestMarkdown(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"heading one level down", "# Title\n## Part", "<h2>Title</h2>\n<h3>Part</h3>\n"},
		{"paragraph joins lines", "one\ntwo", "<p>one two</p>\n"},
		{"inline", "run `a <b>` **now**, *really*", "<p>run <code>a &lt;b&gt;</code> <b>now</b>, <i>really</i></p>\n"},
		{"html is escaped", "<script>alert(1)</script>", "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>\n"},
		{"list with a continuation", "- one\n  more\n- two", "<ul>\n<li>one more</li>\n<li>two</li>\n</ul>\n"},
		{"ordered list", "1. a\n2. b", "<ol>\n<li>a</li>\n<li>b</li>\n</ol>\n"},
		{"fenced code keeps its lines", "```sh\ncurl -s 'x?a=1&b=2'\n```", "<pre><code>curl -s &#39;x?a=1&amp;b=2&#39;\n</code></pre>\n"},
		{"table", "| a | b |\n|---|---|\n| 1 | 2 |", "<table class=\"md\">\n<tr><td>a</td><td>b</td></tr>\n<tr><td>1</td><td>2</td></tr>\n</table>\n"},
		{"a runbook link opens here", "[next](eligibility.md)", "<p><a href=\"/runbooks/eligibility\">next</a></p>\n"},
		{"a javascript link is text", "[x](javascript:alert(1))", "<p>x)</p>\n"},
		{"an outside link", "[etcd](https://etcd.io/docs)", "<p><a href=\"https://etcd.io/docs\">etcd</a></p>\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(markdown(tt.src)); got != tt.want {
				t.Errorf("markdown(%q) =\n%s\nwant\n%s", tt.src, got, tt.want)
			}
		})
	}
}

// Every runbook renders, and every runbook an alert or an incident links to exists.
func TestRunbooksRender(t *testing.T) {
	names := runbookNames()
	if len(names) < 5 {
		t.Fatalf("runbooks: %v", names)
	}
	for _, n := range names {
		src, err := fs.ReadFile(docs.Runbooks, "runbooks/"+n+".md")
		if err != nil {
			t.Fatal(err)
		}
		if html := string(markdown(string(src))); !strings.HasPrefix(html, "<h2>") || strings.Contains(html, "```") {
			t.Errorf("%s renders badly: %.200s", n, html)
		}
	}
	for _, link := range []string{"/runbooks/eligibility", "/runbooks/incident-spike"} {
		if _, err := fs.Stat(docs.Runbooks, "runbooks/"+strings.TrimPrefix(link, "/runbooks/")+".md"); err != nil {
			t.Errorf("incidents link to %s: %v", link, err)
		}
	}
}

package dashboard

import (
	"html"
	"html/template"
	"io/fs"
	"net/http"
	"regexp"
	"strings"

	"github.com/meshflows/meshflows/docs"
)

// runbookData is the Runbooks tab: the list, and one runbook rendered.
type runbookData struct {
	Names []string
	Name  string
	Body  template.HTML
}

func runbookNames() []string {
	entries, _ := fs.Glob(docs.Runbooks, "runbooks/*.md")
	var names []string
	for _, e := range entries {
		n := strings.TrimSuffix(strings.TrimPrefix(e, "runbooks/"), ".md")
		if n != "README" {
			names = append(names, n)
		}
	}
	return names
}

// runbooks serves /runbooks (the index) and /runbooks/{name}.
func (d *Dashboard) runbooks(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if name == "" {
		name = "README"
	}
	src, err := fs.ReadFile(docs.Runbooks, "runbooks/"+name+".md")
	if err != nil || strings.ContainsAny(name, "/.") {
		http.Error(w, "no runbook "+name, http.StatusNotFound)
		return
	}
	d.render(w, r, "runbooks", "Runbooks", runbookData{Names: runbookNames(), Name: name, Body: markdown(string(src))}, nil)
}

var (
	inlineCode = regexp.MustCompile("`([^`]+)`")
	bold       = regexp.MustCompile(`\*\*([^*]+)\*\*`)
	italic     = regexp.MustCompile(`(^|[^*\w])\*([^*\s][^*]*)\*`)
	link       = regexp.MustCompile(`\[([^\]]+)\]\(([^)\s]+)\)`)
)

// inline renders the inline markdown of one escaped line: code, bold, emphasis, links (a
// runbook's link to another opens it here; other relative links are plain text).
func inline(s string) string {
	s = html.EscapeString(s)
	var codes []string
	s = inlineCode.ReplaceAllStringFunc(s, func(m string) string {
		codes = append(codes, "<code>"+m[1:len(m)-1]+"</code>")
		return "\x00"
	})
	s = link.ReplaceAllStringFunc(s, func(m string) string {
		p := link.FindStringSubmatch(m)
		text, target := p[1], p[2]
		switch {
		case strings.HasPrefix(target, "http://"), strings.HasPrefix(target, "https://"):
			return `<a href="` + target + `">` + text + `</a>`
		case strings.HasSuffix(target, ".md") && !strings.Contains(target, "/"):
			return `<a href="/runbooks/` + strings.TrimSuffix(target, ".md") + `">` + text + `</a>`
		}
		return text
	})
	s = bold.ReplaceAllString(s, "<b>$1</b>")
	s = italic.ReplaceAllString(s, "$1<i>$2</i>")
	for _, c := range codes {
		s = strings.Replace(s, "\x00", c, 1)
	}
	return s
}

// markdown renders the subset of Markdown the runbooks use: headings, paragraphs, lists,
// fenced code, tables and inline code, emphasis and links. Everything is escaped first.
func markdown(src string) template.HTML {
	var b strings.Builder
	lines := strings.Split(src, "\n")
	var para []string
	list := ""
	flush := func() {
		if len(para) > 0 {
			b.WriteString("<p>" + inline(strings.Join(para, " ")) + "</p>\n")
			para = nil
		}
		if list != "" {
			b.WriteString("</" + list + ">\n")
			list = ""
		}
	}
	olItem := regexp.MustCompile(`^\d+\.\s+`)
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "```"):
			flush()
			b.WriteString("<pre><code>")
			for i++; i < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[i]), "```"); i++ {
				b.WriteString(html.EscapeString(lines[i]) + "\n")
			}
			b.WriteString("</code></pre>\n")
		case t == "":
			flush()
		case strings.HasPrefix(t, "#"):
			flush()
			level := min(len(t)-len(strings.TrimLeft(t, "#"))+1, 6) // the page's h1 is the console's
			b.WriteString("<h" + string(rune('0'+level)) + ">" + inline(strings.TrimSpace(strings.TrimLeft(t, "#"))) + "</h" + string(rune('0'+level)) + ">\n")
		case strings.HasPrefix(t, "|"):
			flush()
			b.WriteString("<table class=\"md\">\n")
			for ; i < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i]), "|"); i++ {
				row := strings.Trim(strings.TrimSpace(lines[i]), "|")
				if strings.Trim(row, "-|: ") == "" {
					continue // the header's underline
				}
				b.WriteString("<tr>")
				for _, cell := range strings.Split(row, "|") {
					b.WriteString("<td>" + inline(strings.TrimSpace(cell)) + "</td>")
				}
				b.WriteString("</tr>\n")
			}
			i--
			b.WriteString("</table>\n")
		case strings.HasPrefix(t, "- ") || strings.HasPrefix(t, "* ") || olItem.MatchString(t):
			kind, item := "ul", strings.TrimSpace(t[2:])
			if m := olItem.FindString(t); m != "" {
				kind, item = "ol", t[len(m):]
			}
			if len(para) > 0 || list != kind {
				flush()
				list = kind
				b.WriteString("<" + kind + ">\n")
			}
			// continuation lines of the item
			for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "  ") && strings.TrimSpace(lines[i+1]) != "" &&
				!strings.HasPrefix(strings.TrimSpace(lines[i+1]), "- ") && !olItem.MatchString(strings.TrimSpace(lines[i+1])) {
				i++
				item += " " + strings.TrimSpace(lines[i])
			}
			b.WriteString("<li>" + inline(item) + "</li>\n")
		default:
			if list != "" {
				flush()
			}
			para = append(para, t)
		}
	}
	flush()
	return template.HTML(b.String()) // every piece of text went through html.EscapeString
}

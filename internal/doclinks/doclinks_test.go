package doclinks

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// repoRoot walks up from the test's working directory to the directory
// holding go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// markdownFiles lists the Markdown files git knows of, relative to root:
// the tracked ones and the untracked ones it does not ignore (a new page is
// checked before it is committed).
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not available:", err)
	}
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "*.md")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout?)", err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	return files
}

var fenceRE = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")

// blankCode returns the text with fenced code blocks and inline code
// spans replaced by spaces (line breaks kept, so offsets and line numbers
// stay those of the file).
func blankCode(text string) string {
	lines := strings.SplitAfter(text, "\n")
	fence := "" // the opening fence while inside a block
	for i, line := range lines {
		trimmed := strings.TrimRight(line, "\r\n")
		if fence == "" {
			if m := fenceRE.FindStringSubmatch(trimmed); m != nil {
				fence = m[1]
				lines[i] = blank(line)
			}
			continue
		}
		// A closing fence: the same character, at least as long, nothing after it.
		s := strings.TrimLeft(trimmed, " ")
		if len(trimmed)-len(s) <= 3 && strings.HasPrefix(s, fence) && strings.Trim(s, fence[:1]+" \t") == "" {
			fence = ""
		}
		lines[i] = blank(line)
	}
	return blankSpans(strings.Join(lines, ""))
}

// blankSpans blanks inline code spans: a run of N backticks up to the next
// run of exactly N backticks in the same paragraph.
func blankSpans(s string) string {
	b := []byte(s)
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(b) && b[i+n] == '`' {
			n++
		}
		end := -1
		for j := i + n; j < len(b); {
			if b[j] == '\n' && j+1 < len(b) && strings.TrimSpace(lineAt(b, j+1)) == "" {
				break // a blank line ends the paragraph
			}
			if b[j] != '`' {
				j++
				continue
			}
			m := 0
			for j+m < len(b) && b[j+m] == '`' {
				m++
			}
			if m == n {
				end = j + m
				break
			}
			j += m
		}
		if end < 0 {
			i += n // literal backticks
			continue
		}
		for k := i; k < end; k++ {
			if b[k] != '\n' {
				b[k] = ' '
			}
		}
		i = end
	}
	return string(b)
}

func lineAt(b []byte, i int) string {
	j := i
	for j < len(b) && b[j] != '\n' {
		j++
	}
	return string(b[i:j])
}

func blank(line string) string {
	var sb strings.Builder
	for _, r := range line {
		if r == '\n' || r == '\r' {
			sb.WriteRune(r)
		} else {
			sb.WriteByte(' ')
		}
	}
	return sb.String()
}

// linkRE matches an inline link or image: [text](target "title"). The text
// may hold one level of brackets; the target is <...> or has no spaces and
// only balanced parentheses.
var linkRE = regexp.MustCompile(`\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(<[^>\n]*>|[^\s()<>]*(?:\([^\s()]*\)[^\s()<>]*)*)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)`)

var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

type link struct {
	line   int
	target string
}

// links returns the inline links of a Markdown text outside code.
func links(text string) []link {
	clean := blankCode(text)
	var out []link
	for _, m := range linkRE.FindAllStringSubmatchIndex(clean, -1) {
		target := strings.TrimSuffix(strings.TrimPrefix(clean[m[4]:m[5]], "<"), ">")
		out = append(out, link{line: 1 + strings.Count(clean[:m[0]], "\n"), target: target})
	}
	return out
}

var (
	atxRE      = regexp.MustCompile(`^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)
	htmlIDRE   = regexp.MustCompile(`<a\s+(?:[^>]*\s)?(?:name|id)\s*=\s*"([^"]*)"`)
	headLinkRE = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// slug is GitHub's anchor for a heading: lowercase, everything but
// letters, digits, spaces, hyphens and underscores dropped, spaces to
// hyphens.
func slug(heading string) string {
	heading = headLinkRE.ReplaceAllString(heading, "$1")
	var sb strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			sb.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			sb.WriteRune(r)
		}
	}
	return sb.String()
}

// anchors returns the anchors of a Markdown text: its headings' slugs
// (a repeated slug also as slug-1, slug-2, ... as GitHub numbers them) and
// explicit <a name=...> or id=... anchors.
func anchors(text string) map[string]bool {
	set := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(blankFences(text), "\n") {
		line = strings.TrimRight(line, "\r")
		if m := atxRE.FindStringSubmatch(line); m != nil {
			s := slug(m[1])
			if n := seen[s]; n > 0 {
				set[s+"-"+strconv.Itoa(n)] = true
			} else {
				set[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlIDRE.FindAllStringSubmatch(line, -1) {
			set[m[1]] = true
		}
	}
	return set
}

// blankFences blanks fenced code blocks only (headings keep their code spans).
func blankFences(text string) string {
	lines := strings.SplitAfter(text, "\n")
	fence := ""
	for i, line := range lines {
		trimmed := strings.TrimRight(line, "\r\n")
		if fence == "" {
			if m := fenceRE.FindStringSubmatch(trimmed); m != nil {
				fence = m[1]
				lines[i] = blank(line)
			}
			continue
		}
		s := strings.TrimLeft(trimmed, " ")
		if len(trimmed)-len(s) <= 3 && strings.HasPrefix(s, fence) && strings.Trim(s, fence[:1]+" \t") == "" {
			fence = ""
		}
		lines[i] = blank(line)
	}
	return strings.Join(lines, "")
}

// TestRelativeLinks fails for every relative link of a Markdown
// file whose target does not exist, and for every #anchor on a link to a
// Markdown file that names no heading of that file.
func TestRelativeLinks(t *testing.T) {
	root := repoRoot(t)
	files := markdownFiles(t, root)
	if len(files) == 0 {
		t.Skip("git ls-files lists no Markdown file")
	}
	anchorCache := map[string]map[string]bool{}
	checked := 0
	for _, file := range files {
		b, err := os.ReadFile(filepath.Join(root, file))
		if os.IsNotExist(err) {
			continue // tracked, deleted in the working tree
		}
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		for _, l := range links(string(b)) {
			if l.target == "" || schemeRE.MatchString(l.target) || strings.HasPrefix(l.target, "#") {
				continue
			}
			checked++
			p, frag, _ := strings.Cut(l.target, "#")
			p, _, _ = strings.Cut(p, "?")
			if u, err := url.PathUnescape(p); err == nil {
				p = u
			}
			var abs string
			if strings.HasPrefix(p, "/") { // GitHub resolves these from the repository root
				abs = filepath.Join(root, filepath.FromSlash(p))
			} else {
				abs = filepath.Join(root, filepath.Dir(file), filepath.FromSlash(p))
			}
			if _, err := os.Stat(abs); err != nil {
				t.Errorf("%s:%d: link to %q: %s does not exist", file, l.line, l.target, relTo(root, abs))
				continue
			}
			if frag == "" || !strings.HasSuffix(strings.ToLower(p), ".md") {
				continue
			}
			set, ok := anchorCache[abs]
			if !ok {
				tb, err := os.ReadFile(abs)
				if err != nil {
					t.Errorf("%s:%d: %v", file, l.line, err)
					continue
				}
				set = anchors(string(tb))
				anchorCache[abs] = set
			}
			if f, err := url.PathUnescape(frag); err == nil {
				frag = f
			}
			if !set[strings.ToLower(frag)] && !set[frag] {
				t.Errorf("%s:%d: link to %q: %s has no heading with anchor #%s", file, l.line, l.target, relTo(root, abs), frag)
			}
		}
	}
	t.Logf("%d Markdown files, %d relative links checked", len(files), checked)
}

func relTo(root, abs string) string {
	if r, err := filepath.Rel(root, abs); err == nil {
		return filepath.ToSlash(r)
	}
	return abs
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Which front end": "which-front-end",
		"GPU-aligned pools (`binding: gpuAligned`)":                          "gpu-aligned-pools-binding-gpualigned",
		"Host directory (`--alloc-dir`, default `/var/run/kube-rdma/alloc`)": "host-directory---alloc-dir-default-varrunkube-rdmaalloc",
		"make release-check": "make-release-check",
		"A real cluster on this machine: `make e2e-local`": "a-real-cluster-on-this-machine-make-e2e-local",
		"snake_case and [a link](x.md)":                    "snake_case-and-a-link",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLinks(t *testing.T) {
	text := "see [a](a.md#x) and `[b](b.md)`\n\n```sh\n[c](c.md)\n```\n[d\ntext](d/e.md \"title\") ![img](p.png)\n"
	got := links(text)
	want := []link{{1, "a.md#x"}, {6, "d/e.md"}, {7, "p.png"}}
	if len(got) != len(want) {
		t.Fatalf("links = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("links[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

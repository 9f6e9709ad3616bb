package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// readmeMaxLines is how long the README may grow: a newcomer's path, with
// the reference in docs/.
const readmeMaxLines = 520

// TestDocsLinks holds every relative Markdown link of README.md and
// docs/*.md to a file that exists and, when it names an #anchor, to a
// heading of that file, with GitHub's slugs; and the README to its length.
func TestDocsLinks(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{filepath.Join(root, "README.md")}, pages...)
	// The TypeScript SDK's README is the npm package's page, linked from both.
	pages = append(pages, filepath.Join(root, "sdk", "typescript", "README.md"))

	readme, err := os.ReadFile(pages[0])
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move the reference to docs/", n, readmeMaxLines)
	}

	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(b))
		anchors[path] = a
		return a, nil
	}

	links := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		for _, l := range markdownLinks(string(b)) {
			target, anchor, _ := strings.Cut(l.target, "#")
			if isExternal(target) {
				continue
			}
			links++
			path := page
			if target != "" {
				path = filepath.Join(filepath.Dir(page), filepath.FromSlash(target))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: the link %q points at %s, which does not exist", rel, l.line, l.target, target)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(path, ".md") {
				t.Errorf("%s:%d: the link %q has an anchor into a file that is not Markdown", rel, l.line, l.target)
				continue
			}
			a, err := anchorsOf(path)
			if err != nil {
				t.Errorf("%s:%d: %v", rel, l.line, err)
				continue
			}
			if !a[anchor] {
				t.Errorf("%s:%d: the link %q names #%s, which is no heading of %s", rel, l.line, l.target, anchor, target)
			}
		}
	}
	if links < 20 {
		t.Errorf("found %d relative links in README.md, docs/ and sdk/typescript/README.md: the parser is broken", links)
	}
}

// TestDocsLinksParser pins the link parser and the slugs on samples: a
// broken link must be found, and a link in code must not.
func TestDocsLinksParser(t *testing.T) {
	t.Parallel()
	md := "# Title\n\nSee [a](a.md#x-y), ![img](p.png \"t\") and `[not](code.md)`.\n" +
		"```sh\n[not](fenced.md)\n# not a heading\n```\n" +
		"## Host bindings (webhooks)\n## The command line (`agentos`)\n## Files: ranges, validators, archives\n## Title\n" +
		"<http://example.com> [ext](https://example.com/x) [mail](mailto:a@b.c)\n"
	var got []string
	for _, l := range markdownLinks(md) {
		got = append(got, l.target)
	}
	if want := "a.md#x-y p.png https://example.com/x mailto:a@b.c"; strings.Join(got, " ") != want {
		t.Errorf("links %q, want %q", strings.Join(got, " "), want)
	}
	a := headingAnchors(md)
	for _, want := range []string{"title", "host-bindings-webhooks", "the-command-line-agentos", "files-ranges-validators-archives", "title-1"} {
		if !a[want] {
			t.Errorf("no anchor %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("a comment in a code block is taken for a heading")
	}
}

type mdLink struct {
	target string
	line   int
}

var (
	fenceRe      = regexp.MustCompile("^\\s*(```|~~~)")
	inlineCodeRe = regexp.MustCompile("`[^`]*`")
	linkRe       = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	headingRe    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// markdownLinks returns the targets of the inline links and images of md,
// outside code blocks and code spans.
func markdownLinks(md string) []mdLink {
	var out []mdLink
	inFence := false
	for i, line := range strings.Split(md, "\n") {
		if fenceRe.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		line = inlineCodeRe.ReplaceAllString(line, "")
		for _, m := range linkRe.FindAllStringSubmatch(line, -1) {
			out = append(out, mdLink{target: m[1], line: i + 1})
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives the headings of md:
// lower case, punctuation dropped, spaces as hyphens, and -1, -2 for
// repeats.
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(md, "\n") {
		if fenceRe.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		m := headingRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := githubSlug(m[1])
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// githubSlug is GitHub's anchor for a heading's text.
func githubSlug(text string) string {
	// A link in a heading keeps its text only.
	text = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r) || unicode.IsNumber(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

func isExternal(target string) bool {
	return regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`).MatchString(target) || strings.HasPrefix(target, "//")
}

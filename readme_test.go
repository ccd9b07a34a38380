package maint_test

// The README is what a user reads in the first hour (issue 38): its code
// must compile as written, its test command must be the one CI runs, its
// application test must be the one mainttest runs, and it must stay short.

import (
	"bytes"
	"fmt"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
	"testing"
	"time"
)

// readmeBlock is one fenced block of README.md.
type readmeBlock struct {
	lang string // the fence's info string: go, sh, text...
	line int    // README.md's line of the block's first line of code
	code string
}

// readmeBlocks returns README.md's fenced blocks.
func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []readmeBlock
	var cur *readmeBlock
	var body []string
	for i, l := range strings.Split(string(src), "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &readmeBlock{lang: strings.TrimSpace(strings.TrimPrefix(l, "```")), line: i + 2}
			body = nil
		case cur != nil && strings.TrimSpace(l) == "```":
			cur.code = strings.Join(body, "\n")
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			body = append(body, l)
		}
	}
	if cur != nil {
		t.Fatalf("README.md:%d: a block is never closed", cur.line-1)
	}
	return blocks
}

// snippetImports maps a package name a README snippet may use to its path.
var snippetImports = map[string]string{
	"maint":     "github.com/maintkit/maint",
	"mainttest": "github.com/maintkit/maint/mainttest",
	"maintotel": "github.com/maintkit/maint/maintotel",
	"redis":     "github.com/redis/go-redis/v9",
	"atomic":    "sync/atomic",
	"context":   "context",
	"errors":    "errors",
	"fmt":       "fmt",
	"log":       "log",
	"os":        "os",
	"slog":      "log/slog",
	"testing":   "testing",
	"time":      "time",
}

// usedPackage finds a qualified identifier outside comments: name.X.
var usedPackage = regexp.MustCompile(`(?:^|[^\w.])([a-z]+)\.[A-Za-z_]`)

// snippetFile wraps a README snippet into a Go file of package main: the
// imports it uses, and the snippet inside a function unless it declares at
// the top level (a func of its own, such as a test). A //line directive
// makes the compiler name README.md's own lines (readme: its path).
func snippetFile(b readmeBlock, readme string) string {
	var code []string
	for _, l := range strings.Split(b.code, "\n") {
		if i := strings.Index(l, "//"); i >= 0 {
			l = l[:i] // a comment's words are not the snippet's packages
		}
		code = append(code, l)
	}
	imports := map[string]bool{}
	for _, m := range usedPackage.FindAllStringSubmatch(strings.Join(code, "\n"), -1) {
		if path, ok := snippetImports[m[1]]; ok {
			imports[path] = true
		}
	}
	var paths []string
	for p := range imports {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var f strings.Builder
	f.WriteString("package main\n\nimport (\n")
	for _, p := range paths {
		fmt.Fprintf(&f, "\t%q\n", p)
	}
	f.WriteString(")\n\nfunc main() {}\n\n")
	_, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+b.code, parser.SkipObjectResolution)
	top := err == nil // declarations only: a test of its own, say
	if !top {
		f.WriteString("func snippet() {\n")
	}
	fmt.Fprintf(&f, "//line %s:%d\n%s\n", readme, b.line, b.code)
	if !top {
		f.WriteString("}\n")
	}
	return f.String()
}

// gofmtSnippet formats a README snippet as gofmt would, inside a function
// body unless it declares at the top level, and reports whether it parses.
func gofmtSnippet(code string) (string, bool) {
	if out, err := format.Source([]byte("package p\n\n" + code + "\n")); err == nil {
		return strings.TrimSuffix(strings.TrimPrefix(string(out), "package p\n\n"), "\n"), true
	}
	lines := strings.Split(code, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = "\t" + l
		}
	}
	out, err := format.Source([]byte("package p\n\nfunc f() {\n" + strings.Join(lines, "\n") + "\n}\n"))
	if err != nil {
		return err.Error(), false
	}
	body := strings.TrimSuffix(strings.SplitN(string(out), "func f() {\n", 2)[1], "\n}\n")
	lines = strings.Split(body, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "\t")
	}
	return strings.Join(lines, "\n"), true
}

// snippetModule writes a module at dir for the snippets: the go.mod of the
// module at modDir (the repository's root or maintotel) renamed, with maint
// and maintotel replaced by this checkout, and its go.sum, so that the
// build needs nothing beyond the module cache. A test binary built on
// another go-redis release (.ci/goredis test newest) uses that release's
// go.mod and go.sum, which .ci/goredis wrote under .goredis. It returns
// the go.mod it started from, relative to root.
func snippetModule(t *testing.T, root, modDir, dir string) (gomodPath string) {
	t.Helper()
	mod, sum := filepath.Join(modDir, "go.mod"), filepath.Join(modDir, "go.sum")
	if v := builtGoRedis(); v != "" {
		alt := filepath.Join(modDir, ".goredis", v+".mod")
		if _, err := os.Stat(alt); err == nil && !fileHas(t, mod, "github.com/redis/go-redis/v9 "+v+"\n") {
			mod, sum = alt, strings.TrimSuffix(alt, ".mod")+".sum"
		}
	}
	gomod, err := os.ReadFile(mod)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(gomod), "\n") {
		switch {
		case strings.HasPrefix(l, "module "):
			l = "module readmesnippets"
		case strings.HasPrefix(l, "replace "):
			continue // maintotel's own replace of maint, by a relative path: rewritten below
		}
		out = append(out, l)
	}
	out = append(out,
		"require github.com/maintkit/maint v0.0.0-00010101000000-000000000000",
		"replace github.com/maintkit/maint => "+root)
	if modDir != root {
		out = append(out,
			"require github.com/maintkit/maint/maintotel v0.0.0-00010101000000-000000000000",
			"replace github.com/maintkit/maint/maintotel => "+modDir)
	}
	writeFile(t, filepath.Join(dir, "go.mod"), strings.Join(out, "\n")+"\n")
	gosum, err := os.ReadFile(sum)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "go.sum"), string(gosum))
	rel, err := filepath.Rel(root, mod)
	if err != nil {
		return mod
	}
	return rel
}

// builtGoRedis is the go-redis release this test binary was built with.
func builtGoRedis() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/redis/go-redis/v9" {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return ""
}

func fileHas(t *testing.T, path, s string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(b, []byte(s))
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadmeGoBlocksCompile builds every ```go block of README.md as it is
// written, each in a package of its own, offline: the module cache is all
// it uses (GOPROXY=off). A block that uses maintotel builds in a module made
// from maintotel's go.mod; where the cache lacks OpenTelemetry (maintotel's
// modules are downloaded by .ci/run, not by `go test ./...`), that build is
// skipped, and said. Under -short it is skipped: on a cold build cache it
// compiles the standard library and every dependency again.
func TestReadmeGoBlocksCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: about a second on a warm build cache, but more than a minute on a cold one")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	dirs := map[string]string{root: filepath.Join(tmp, "core"), filepath.Join(root, "maintotel"): filepath.Join(tmp, "otel")}
	built := map[string][]readmeBlock{}
	for _, b := range readmeBlocks(t) {
		if b.lang != "go" {
			continue
		}
		if strings.Contains(b.code, "...") {
			t.Errorf("README.md:%d: a go block with \"...\": write it whole, it is compiled", b.line)
		}
		if formatted, ok := gofmtSnippet(b.code); !ok || formatted != b.code {
			t.Errorf("README.md:%d: the block is not as gofmt formats it:\n%s", b.line, formatted)
		}
		modDir := root
		if strings.Contains(b.code, "maintotel.") {
			modDir = filepath.Join(root, "maintotel")
		}
		writeFile(t, filepath.Join(dirs[modDir], fmt.Sprintf("line%d", b.line), "main.go"), snippetFile(b, filepath.Join(root, "README.md")))
		built[modDir] = append(built[modDir], b)
	}
	if len(built[root]) == 0 {
		t.Fatal("README.md has no go block")
	}
	for modDir, blocks := range built {
		dir := dirs[modDir]
		module := snippetModule(t, root, modDir, dir)
		start := time.Now()
		args := []string{"vet"}
		if raceOn && modDir == root {
			args = append(args, "-race") // the packages this binary was built of, from the build cache
		}
		cmd := exec.Command(gobin, append(args, "./...")...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		lines := make([]string, len(blocks))
		for i, b := range blocks {
			lines[i] = fmt.Sprint(b.line)
		}
		if err != nil && modDir != root && bytes.Contains(out, []byte("GOPROXY=off")) {
			t.Logf("skipped the blocks at README.md lines %s: the module cache lacks maintotel's modules "+
				"(cd maintotel && go mod download):\n%s", strings.Join(lines, ", "), out)
			continue
		}
		if err != nil {
			t.Errorf("the go blocks at README.md lines %s do not all compile (each is package dir lineN):\n%s",
				strings.Join(lines, ", "), out)
			continue
		}
		t.Logf("%d blocks (README.md lines %s) compile on %s, in %v",
			len(blocks), strings.Join(lines, ", "), module, time.Since(start).Round(time.Millisecond))
	}
}

// TestReadmeIsUnder200Lines: the README is for the first hour; measurements
// and reference go to docs/, conformance/ and cmd/maintdemo/.
func TestReadmeIsUnder200Lines(t *testing.T) {
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(src), "\n"), "\n")
	if len(lines) >= 200 {
		t.Errorf("README.md has %d lines, want fewer than 200", len(lines))
	}
	for i, l := range lines {
		if n := len([]rune(l)); n > 200 {
			t.Errorf("README.md:%d: %d characters, want at most 200", i+1, n)
		}
	}
}

// TestReadmeStartsWithTheCommandsCIRuns: the README's first block runs the
// demo and the tests, with the test commands .ci/run runs, on both ends of
// the go-redis range.
func TestReadmeStartsWithTheCommandsCIRuns(t *testing.T) {
	blocks := readmeBlocks(t)
	if len(blocks) == 0 || blocks[0].lang != "sh" {
		t.Fatal("README.md does not start with a sh block")
	}
	ci, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	first := blocks[0].code
	for _, want := range []struct{ readme, ci string }{
		{"go run ./cmd/maintdemo ", ""},
		{"go test -race -timeout 30m ./... ", "\ngo test -race -timeout 30m ./...\n"},
		{".ci/goredis test newest -race -timeout 30m ./... ", `go test -modfile="$NEWMOD" -tags="$NEWTAGS" -race -timeout 30m ./...`},
	} {
		if !strings.Contains(first, want.readme) {
			t.Errorf("README.md's first block lacks %q:\n%s", want.readme, first)
		}
		if want.ci != "" && !bytes.Contains(ci, []byte(want.ci)) {
			t.Errorf(".ci/run no longer runs %q, which the README's %q stands for", strings.TrimSpace(want.ci), want.readme)
		}
	}
	if !strings.HasPrefix(strings.TrimPrefix(string(mustRead(t, "README.md")), "# maint\n\n"), "```sh") {
		t.Error("README.md's first block is not right under its title")
	}
}

// TestReadmeApplicationTestIsMainttests: the README's example of testing an
// application is mainttest's TestOrdersSurviveAMove word for word, which
// runs (and beside which TestOrdersWithoutMaintFailTheSameMove proves that
// the same test fails without maint).
func TestReadmeApplicationTestIsMainttests(t *testing.T) {
	file := string(mustRead(t, filepath.Join("mainttest", "example_app_test.go")))
	found := false
	for _, b := range readmeBlocks(t) {
		if b.lang != "go" || !strings.HasPrefix(b.code, "func Test") {
			continue
		}
		found = true
		if !strings.Contains(file, b.code+"\n") {
			t.Errorf("README.md:%d: this test is not mainttest/example_app_test.go's, word for word", b.line)
		}
	}
	if !found {
		t.Error("README.md shows no application test")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Command testsummary reads `go test -json` on stdin and prints what plain
// `go test` prints (each package's result line, the output of failed tests),
// then the skipped tests grouped by reason and one closing line,
// "tests: N passed, N failed, N skipped". A test that re-ran as root in a
// user namespace and passed there (internal/netnstest) counts as passed. It
// exits 1 if a test or a package failed. `make test` uses it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
)

type event struct {
	Action, Package, Test, Output string
}

// logLine is a t.Log/t.Skip line in verbose output: "    file.go:12: msg".
var logLine = regexp.MustCompile(`^\s+\S+\.go:\d+: (.*)`)

// inUserns is the start of the skip message of a test that passed in a
// user namespace; it must match internal/netnstest.
const inUserns = "passed as root in a user namespace"

func main() {
	out := map[string][]string{} // package and test -> output lines
	reasons := map[string][]string{}
	var passed, failed, userns int
	failedPkg := false
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Println(sc.Text())
			continue
		}
		key := e.Package + " " + e.Test
		switch {
		case e.Action == "build-output":
			fmt.Print(e.Output)
		case e.Action == "output" && e.Test == "":
			if e.Output != "PASS\n" {
				fmt.Print(e.Output)
			}
			if strings.HasPrefix(e.Output, "FAIL") {
				failedPkg = true
			}
		case e.Action == "output":
			out[key] = append(out[key], e.Output)
		case e.Action == "fail" && e.Test == "":
			failedPkg = true
		case e.Test == "":
		case e.Action == "pass":
			passed++
			delete(out, key)
		case e.Action == "fail":
			failed++
			fmt.Print(strings.Join(out[key], ""))
			delete(out, key)
		case e.Action == "skip":
			r := reason(out[key])
			if strings.HasPrefix(r, inUserns) {
				passed++
				userns++
			} else {
				reasons[r] = append(reasons[r], e.Package+" "+e.Test)
			}
			delete(out, key)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
	skipped := 0
	for _, r := range slices.Sorted(maps.Keys(reasons)) {
		skipped += len(reasons[r])
		fmt.Printf("skipped (%d): %s\n", len(reasons[r]), r)
	}
	if userns > 0 {
		fmt.Printf("%d tests passed as root in a user namespace (not run as root here)\n", userns)
	}
	fmt.Printf("tests: %d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 || failedPkg {
		os.Exit(1)
	}
}

// reason is the last log line of a skipped test, without its file:line,
// cut to one line of a terminal.
func reason(lines []string) string {
	r := "(no reason given)"
	for _, l := range lines {
		if m := logLine.FindStringSubmatch(strings.TrimRight(l, "\n")); m != nil {
			r = m[1]
		}
	}
	if len(r) > 120 {
		r = r[:117] + "..."
	}
	return r
}

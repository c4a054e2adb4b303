package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"
)

func newFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
	fs.Duration("every", 500*time.Millisecond, "how often")
	fs.Usage = func() { fmt.Fprintln(fs.Output(), "usage: prog cmd"); fs.PrintDefaults() }
	return fs
}

func TestParse(t *testing.T) {
	tests := []struct {
		args            []string
		wantErr         error // nil, flag.ErrHelp or ErrUsage
		inStdout, inErr string
		exit            int
	}{
		{args: []string{"--every", "1s"}},
		{args: []string{"-h"}, wantErr: flag.ErrHelp, inStdout: "(default 500ms)"},
		{args: []string{"--help"}, wantErr: flag.ErrHelp, inStdout: "usage: prog cmd"},
		{args: []string{"--bogus"}, wantErr: ErrUsage, inErr: "usage: prog cmd", exit: 2},
		{args: []string{"--every", "soon"}, wantErr: ErrUsage, inErr: "usage: prog cmd", exit: 2},
		{args: []string{"extra"}, wantErr: ErrUsage, inErr: "usage: prog cmd", exit: 2},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := Parse(newFlags(), tt.args, &out, &errOut)
			if !errors.Is(err, tt.wantErr) || tt.wantErr == nil && err != nil {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(out.String(), tt.inStdout) || tt.inStdout == "" && out.Len() != 0 ||
				!strings.Contains(errOut.String(), tt.inErr) || tt.inErr == "" && errOut.Len() != 0 {
				t.Errorf("stdout %q, stderr %q; want %q and %q", out.String(), errOut.String(), tt.inStdout, tt.inErr)
			}
			var msg bytes.Buffer
			if code := Exit("prog", err, &msg); code != tt.exit {
				t.Errorf("exit %d, want %d", code, tt.exit)
			}
			if tt.exit != 0 && !strings.HasPrefix(msg.String(), "prog: cmd") {
				t.Errorf("Exit printed %q, want the program and the command first", msg.String())
			}
		})
	}
}

func TestParseArgs(t *testing.T) {
	fs := newFlags()
	var out, errOut bytes.Buffer
	if err := ParseArgs(fs, []string{"--every", "1s", "a", "b"}, &out, &errOut); err != nil || fs.NArg() != 2 || fs.Arg(1) != "b" {
		t.Errorf("ParseArgs = %v, args %q; want a and b", err, fs.Args())
	}
	if err := ParseArgs(newFlags(), []string{"--bogus", "a"}, &out, &errOut); !errors.Is(err, ErrUsage) {
		t.Errorf("ParseArgs with a bad flag = %v, want a usage error", err)
	}
}

func TestBuiltin(t *testing.T) {
	tests := []struct {
		args     []string
		handled  bool
		usageErr bool
		inStdout string
	}{
		{args: nil},
		{args: []string{"run"}},
		{args: []string{"help"}, handled: true, inStdout: "usage: prog"},
		{args: []string{"-h"}, handled: true, inStdout: "usage: prog"},
		{args: []string{"--version"}, handled: true, inStdout: "prog "},
		{args: []string{"version"}, handled: true, inStdout: "commit "},
		{args: []string{"version", "x"}, handled: true, usageErr: true},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			handled, err := Builtin("prog", "usage: prog\n", tt.args, &out, &errOut)
			if handled != tt.handled || errors.Is(err, ErrUsage) != tt.usageErr || !tt.usageErr && err != nil {
				t.Errorf("Builtin = %v, %v; want %v, usage error %v", handled, err, tt.handled, tt.usageErr)
			}
			if !strings.Contains(out.String(), tt.inStdout) {
				t.Errorf("stdout %q, want %q", out.String(), tt.inStdout)
			}
		})
	}
	if code := Exit("prog", errors.New("boom"), &bytes.Buffer{}); code != 1 {
		t.Errorf("Exit of a runtime error = %d, want 1", code)
	}
}

// Package cli is what every kube-rdma binary does the same way with its
// command line: -h/--help prints the usage on stdout and exits 0; a bad
// flag, a stray argument or an unknown command prints the usage on stderr
// and exits 2; --version prints the build. It owns no flags and no commands.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/kube-rdma/kube-rdma/internal/version"
)

// ErrUsage marks a command line the binary cannot run (exit status 2).
var ErrUsage = errors.New("bad command line")

type usageError struct{ err error }

func (e usageError) Error() string        { return e.err.Error() }
func (e usageError) Unwrap() error        { return e.err }
func (e usageError) Is(target error) bool { return target == ErrUsage }

// Usagef returns an error that Is ErrUsage.
func Usagef(format string, a ...any) error {
	return usageError{fmt.Errorf(format, a...)}
}

// Parse parses args into fs, whose Usage writes to fs.Output(). -h or
// --help prints the usage on stdout and returns flag.ErrHelp. An unknown or
// malformed flag, or any positional argument, prints the usage on stderr
// and returns an error that Is ErrUsage. Afterwards fs writes to stderr.
func Parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	return parse(fs, args, stdout, stderr, false)
}

// ParseArgs is Parse for a command that takes positional arguments (fs.Args
// after it).
func ParseArgs(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	return parse(fs, args, stdout, stderr, true)
}

func parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer, positional bool) error {
	fs.SetOutput(io.Discard) // flag would print the error above the usage; Exit prints it last
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		fs.SetOutput(stderr)
		return err
	case err != nil:
		err = usageError{fmt.Errorf("%s: %w", fs.Name(), err)}
	case fs.NArg() > 0 && !positional:
		err = Usagef("%s takes no arguments, got %q", fs.Name(), fs.Args())
	}
	fs.SetOutput(stderr)
	if err != nil {
		fs.Usage()
	}
	return err
}

// IsHelp reports whether arg asks for help.
func IsHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// IsVersion reports whether arg asks for the version.
func IsVersion(arg string) bool {
	return arg == "--version" || arg == "-version" || arg == "version"
}

// PrintVersion writes "<prog> <version> (commit ..., built ..., go...)".
func PrintVersion(w io.Writer, prog string) {
	fmt.Fprintf(w, "%s %s\n", prog, version.Get())
}

// Exit prints err on stderr and returns the exit status: 0 for nil and
// flag.ErrHelp, 2 for a usage error, 1 otherwise.
func Exit(prog string, err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", prog, err)
	return 1
}

// Builtin answers the commands every binary has: help (-h, --help) prints
// usage on stdout, version (--version) prints the build. It reports whether
// args[0] was one of them; extra arguments after it are a usage error.
func Builtin(prog, usage string, args []string, stdout, stderr io.Writer) (bool, error) {
	if len(args) == 0 || !IsHelp(args[0]) && !IsVersion(args[0]) {
		return false, nil
	}
	if len(args) > 1 {
		fmt.Fprint(stderr, usage)
		return true, Usagef("%s takes no arguments, got %q", args[0], args[1:])
	}
	if IsHelp(args[0]) {
		fmt.Fprint(stdout, usage)
	} else {
		PrintVersion(stdout, prog)
	}
	return true, nil
}

// Dispatch runs the command args[0] names from cmds, or def when args is
// empty or starts with a flag; help and version are answered first
// (Builtin), and an unknown command is a usage error with the usage on
// stderr.
func Dispatch(prog, usage, def string, args []string, stdout, stderr io.Writer, cmds map[string]func(args []string) error) error {
	if ok, err := Builtin(prog, usage, args, stdout, stderr); ok {
		return err
	}
	cmd := def
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	if run, ok := cmds[cmd]; ok {
		return run(args)
	}
	fmt.Fprint(stderr, usage)
	return Usagef("unknown command %q", cmd)
}

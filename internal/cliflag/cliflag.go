// Package cliflag is the one flag parser of the hindsight and hindsightd commands: the
// standard library's flag package, with flags and positional arguments in any order
// (`hindsight inspect FILE -html OUT` as well as `-html OUT FILE`), `--` ending the
// flags, and a bad flag reported in one line instead of the whole usage.
package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// ErrHelp is returned by Parse after -h or -help, once fs.Usage has printed the usage.
var ErrHelp = flag.ErrHelp

// Parse parses args into fs, flags and positional arguments interleaved; afterwards
// fs.Args() holds the positional arguments in their order. Everything after `--` is
// positional, and so is a lone `-`. A flag that needs a value takes the next argument
// (`-clip -1` sets clip to −1). On -h or -help it prints fs.Usage and returns ErrHelp;
// on any other problem it prints nothing and returns a one-line error that names the
// flag (Fail prints it).
func Parse(fs *flag.FlagSet, args []string) error {
	var flags, positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			positional = append(positional, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil || isBool(f) {
			continue // an unknown flag is reported by fs.Parse below
		}
		if i+1 == len(args) {
			return fmt.Errorf("flag -%s needs a value", name)
		}
		i++
		flags = append(flags, args[i])
	}
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(append(append(flags, "--"), positional...))
	fs.Usage = usage
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		fs.Usage()
		return ErrHelp
	}
	return err
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Fail prints a usage error as one line, "NAME: MSG (NAME -h lists the flags)", to w
// and returns exit status 2.
func Fail(fs *flag.FlagSet, w io.Writer, format string, args ...any) int {
	fmt.Fprintf(w, "%s: %s (%s -h lists the flags)\n", fs.Name(), fmt.Sprintf(format, args...), fs.Name())
	return 2
}

// Run is Parse for a command's main: it returns ok to go on, or the exit status: 0
// after -h, 2 after a one-line error on w.
func Run(fs *flag.FlagSet, args []string, w io.Writer) (code int, ok bool) {
	err := Parse(fs, args)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, ErrHelp):
		return 0, false
	default:
		return Fail(fs, w, "%v", err), false
	}
}

// Rule is one check of a command's parsed flags: when Bad, Msg says what was wrong.
type Rule struct {
	Bad bool
	Msg string
}

// NoArgs is the Rule of a command that takes no positional argument.
func NoArgs(fs *flag.FlagSet) Rule {
	return Rule{fs.NArg() > 0, fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
}

// Check prints the first bad rule's message as one line (Fail) and returns exit
// status 2 and false; with every rule good it returns 0 and true.
func Check(fs *flag.FlagSet, w io.Writer, rules ...Rule) (code int, ok bool) {
	for _, r := range rules {
		if r.Bad {
			return Fail(fs, w, "%s", r.Msg), false
		}
	}
	return 0, true
}

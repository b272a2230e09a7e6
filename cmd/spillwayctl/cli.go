package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway/spillway/clientlib/clientcreds"
)

// Defaults of the global flags.
const (
	defaultServer  = "127.0.0.1:18000"
	defaultTimeout = 5 * time.Second
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1 // the request failed
	exitUsage = 2 // the command line is wrong
)

// usageError is a mistake on the command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// env is what every command gets from the global flags.
type env struct {
	server  string
	timeout time.Duration
	stdout  io.Writer
	stderr  io.Writer
	// creds are --tls-ca, --tls-cert, --tls-key and --token-file: how
	// every gRPC and HTTP call reaches the server.
	creds clientcreds.Config
}

// dial returns a client connection to --server. The connection is lazy: an
// unreachable server shows up as Unavailable on the first request.
func (e *env) dial() (*grpc.ClientConn, error) { return e.dialToken("") }

// withToken is e.creds sending token instead of --token-file when token
// is not "".
func (e *env) withToken(token string) clientcreds.Config {
	c := e.creds
	if token != "" {
		c.TokenFile, c.Token = "", token
	}
	return c
}

// dialToken is dial sending token (e.g. a command's --token) instead of
// --token-file when not "".
func (e *env) dialToken(token string) (*grpc.ClientConn, error) {
	if strings.Contains(e.server, ",") {
		return nil, usagef("--server %q: a list of servers is for agent only", e.server)
	}
	opts, err := e.withToken(token).DialOptions()
	if err != nil {
		return nil, usagef("%v (--tls-ca, --tls-cert, --tls-key, --token-file)", err)
	}
	conn, err := grpc.NewClient(e.server, opts...)
	if err != nil {
		return nil, usagef("--server %q: %v", e.server, err)
	}
	return conn, nil
}

// command is one subcommand.
type command struct {
	name    string
	args    string // positional arguments, for the usage line
	nargs   int    // exact number of positional arguments; -1: the action checks them
	summary string
	// flags defines the command's flags on fs and returns the action to
	// run once they are parsed.
	flags func(fs *flag.FlagSet) action
}

type action func(ctx context.Context, e *env, args []string) error

var commands = []*command{
	registerCommand,
	heartbeatCommand,
	deregisterCommand,
	servicesCommand,
	endpointsCommand,
	agentCommand,
	loadCommand,
	graphCommand,
	weightsCommand,
	panicCommand,
	rolloutCommand,
	configCommand,
	routeCommand,
	auditCommand,
	clusterVersionCommand,
	tokenCommand,
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func globalFlags(fs *flag.FlagSet) (server *string, timeout *time.Duration, creds *clientcreds.Config) {
	server = fs.String("server", defaultServer, "gRPC `address` of the spillway server (agent: a comma-separated list); config, route and audit ask it for the HTTP address unless given --http")
	timeout = fs.Duration("timeout", defaultTimeout, "timeout of each request")
	creds = &clientcreds.Config{}
	fs.StringVar(&creds.CA, "tls-ca", "", "PEM CA bundle `file` that signs the server's certificate (turns on TLS for gRPC and HTTP)")
	fs.StringVar(&creds.Cert, "tls-cert", "", "PEM client certificate `file` (with --tls-key) for a server that verifies clients")
	fs.StringVar(&creds.Key, "tls-key", "", "PEM private key `file` of --tls-cert")
	fs.StringVar(&creds.TokenFile, "token-file", "", "`file` holding a bearer token sent with every call (a command's --token wins)")
	return server, timeout, creds
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: spillwayctl [--server ADDR] [--timeout D] [--tls-ca F [--tls-cert F --tls-key F]] [--token-file F] COMMAND [flags] [args]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nGlobal flags:\n")
	fs := flag.NewFlagSet("spillwayctl", flag.ContinueOnError)
	globalFlags(fs)
	fmt.Fprint(w, flagDefaults(fs))
	fmt.Fprintf(w, "\nRun 'spillwayctl COMMAND -h' for a command's flags.\n")
}

// run is the whole CLI: it parses args (without the program name), runs
// one command and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := flag.NewFlagSet("spillwayctl", flag.ContinueOnError)
	g.SetOutput(io.Discard)
	g.Usage = func() {}
	server, timeout, creds := globalFlags(g)
	if err := g.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout)
			return exitOK
		}
		fmt.Fprintf(stderr, "spillwayctl: %v\nRun 'spillwayctl -h' for usage.\n", dashes(err.Error()))
		return exitUsage
	}
	if g.NArg() == 0 {
		printUsage(stderr)
		return exitUsage
	}
	name := g.Arg(0)
	if name == "help" {
		printUsage(stdout)
		return exitOK
	}
	c := lookup(name)
	if c == nil {
		fmt.Fprintf(stderr, "spillwayctl: unknown command %q\nRun 'spillwayctl -h' for usage.\n", name)
		return exitUsage
	}
	switch {
	case *server == "":
		fmt.Fprintf(stderr, "spillwayctl: --server must not be empty\n")
		return exitUsage
	case *timeout <= 0:
		fmt.Fprintf(stderr, "spillwayctl: --timeout %v: must be positive\n", *timeout)
		return exitUsage
	case (creds.Cert == "") != (creds.Key == ""):
		fmt.Fprintf(stderr, "spillwayctl: --tls-cert and --tls-key go together\n")
		return exitUsage
	}
	e := &env{server: *server, timeout: *timeout, stdout: stdout, stderr: stderr, creds: *creds}
	return c.run(ctx, e, g.Args()[1:])
}

func (c *command) usage(w io.Writer, fs *flag.FlagSet) {
	line := "spillwayctl " + c.name
	if c.args != "" {
		line += " " + c.args
	}
	fmt.Fprintf(w, "Usage: %s [flags]\n\n%s\n", line, c.summary)
	if d := flagDefaults(fs); d != "" {
		fmt.Fprintf(w, "\nFlags:\n%s", d)
	}
}

// longFlag matches a multi-letter flag at the start of a PrintDefaults line.
var longFlag = regexp.MustCompile(`(?m)^  -(\w\w)`)

// flagDefaults is fs.PrintDefaults with "--name" for multi-letter flags.
func flagDefaults(fs *flag.FlagSet) string {
	var buf strings.Builder
	out := fs.Output()
	fs.SetOutput(&buf)
	fs.PrintDefaults()
	fs.SetOutput(out)
	return longFlag.ReplaceAllString(buf.String(), "  --$1")
}

func (c *command) run(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	act := c.flags(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.usage(e.stdout, fs)
			return exitOK
		}
		msg := dashes(err.Error())
		if strings.HasSuffix(msg, "defined: --server") || strings.HasSuffix(msg, "defined: --timeout") {
			msg += " (a global flag: put it before the command)"
		}
		fmt.Fprintf(e.stderr, "spillwayctl %s: %s\nRun 'spillwayctl %s -h' for usage.\n", c.name, msg, c.name)
		return exitUsage
	}
	if c.nargs >= 0 && len(pos) != c.nargs {
		if c.nargs == 0 {
			fmt.Fprintf(e.stderr, "spillwayctl %s: unexpected argument %q\n", c.name, pos[0])
		} else {
			fmt.Fprintf(e.stderr, "spillwayctl %s: want %s, got %d arguments\n", c.name, c.args, len(pos))
		}
		fmt.Fprintf(e.stderr, "Run 'spillwayctl %s -h' for usage.\n", c.name)
		return exitUsage
	}
	err = act(ctx, e, pos)
	if err == nil {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(e.stderr, "spillwayctl %s: %v\nRun 'spillwayctl %s -h' for usage.\n", c.name, err, c.name)
		return exitUsage
	}
	fmt.Fprintf(e.stderr, "spillwayctl %s: %s\n", c.name, describe(err, e))
	return exitError
}

// parseInterspersed parses flags that may come before, between or after the
// positional arguments, which it returns. A lone "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// fs.Parse stops at the first non-flag, or after "--".
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// flagName matches a flag named in the flag package's errors.
var flagName = regexp.MustCompile(`(for flag|defined:|argument:) -(\w)`)

// dashes shows flags the way the usage does, "--port" rather than the flag
// package's "-port".
func dashes(msg string) string { return flagName.ReplaceAllString(msg, "$1 --$2") }

// describe turns a failed request into the line printed on stderr: the
// server's message (which names the bad field), its code, and a hint for
// the usual mistakes.
func describe(err error, e *env) string {
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	switch st.Code() {
	case codes.Unavailable:
		return fmt.Sprintf("%s (Unavailable: is spillway running at --server %s?)", st.Message(), e.server)
	case codes.DeadlineExceeded:
		return fmt.Sprintf("%s (no answer within --timeout %v)", st.Message(), e.timeout)
	}
	return fmt.Sprintf("%s (%v)", st.Message(), st.Code())
}

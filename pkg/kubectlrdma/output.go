package kubectlrdma

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kube-rdma/kube-rdma/internal/cli"
)

// Output formats of -o.
const (
	outTable = "table"
	outWide  = "wide"
	outJSON  = "json"
	outYAML  = "yaml"
)

// addOutputFlag adds -o with the formats a command knows.
func addOutputFlag(c *cobra.Command, p *string, formats ...string) {
	c.Flags().StringVarP(p, "output", "o", outTable, "output format: "+strings.Join(formats, "|"))
	prev := c.PreRunE
	c.PreRunE = func(c *cobra.Command, args []string) error {
		if !slices.Contains(formats, *p) {
			return cli.Usagef("output format %q: want %s", *p, strings.Join(formats, ", "))
		}
		if prev != nil {
			return prev(c, args)
		}
		return nil
	}
}

// writeObject writes v as indented JSON or as YAML. The encoders escape
// C0 controls (ESC, BEL, CR) and replace invalid UTF-8; what they leave raw
// (DEL, C1, bidi overrides) escapeEncoded escapes, so json and yaml output
// is as safe on a terminal as the tables and decodes to the same strings.
func writeObject(w io.Writer, v any, format string) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", format, err)
	}
	if format == outYAML {
		if b, err = toYAML(b); err != nil {
			return fmt.Errorf("encode yaml: %w", err)
		}
		_, err = w.Write(b)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", escapeEncoded(b, false))
	return err
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
}

// row writes tab-separated cells, "-" for an empty one, to a tabwriter:
// it buffers until its Flush, whose error the callers return.
func row(w *tabwriter.Writer, cells ...string) {
	for i, c := range cells {
		if c == "" {
			c = "-"
		}
		if i > 0 {
			_, _ = io.WriteString(w, "\t")
		}
		_, _ = io.WriteString(w, c)
	}
	_, _ = io.WriteString(w, "\n")
}

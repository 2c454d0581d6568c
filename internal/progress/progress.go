// Package progress draws a progress bar for a long operation of the CLI on a terminal, and
// nothing where the output is a log or a pipe.
package progress

import (
	"io"
	"os"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Bar returns a callback that draws a progress bar on w when w is a terminal, and
// does nothing otherwise (logs and pipes stay clean).
func Bar(w io.Writer, total int, what string) func(done, total int) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return func(int, int) {}
	}
	bar := progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(), progressbar.OptionSetElapsedTime(true), progressbar.OptionSetPredictTime(true),
		progressbar.OptionClearOnFinish())
	return func(done, _ int) { _ = bar.Set(done) }
}

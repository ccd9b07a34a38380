package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// progress shows what is running. On a terminal it keeps one line up to date
// and erases it when the run ends; elsewhere (CI logs) it prints one line per
// finished run.
type progress struct {
	w   io.Writer
	tty bool
}

func newProgress(f *os.File) *progress {
	tty := false
	if st, err := f.Stat(); err == nil {
		tty = st.Mode()&os.ModeCharDevice != 0
	}
	return &progress{w: f, tty: tty}
}

// start shows the progress of the run labelled label until the returned
// function is called.
func (p *progress) start(label string, start time.Time, total time.Duration, l *load) (stop func()) {
	line := func() string {
		el := min(time.Since(start), total)
		line := fmt.Sprintf("%s  %4.1fs/%.1fs  ok %7d  failed %6d", label, el.Seconds(), total.Seconds(), l.ok.Load(), l.failed.Load())
		if n := l.notStarted.Load(); n > 0 {
			line += fmt.Sprintf("  not started %6d", n)
		}
		return line
	}
	if !p.tty {
		return func() { fmt.Fprintln(p.w, line()) }
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			fmt.Fprintf(p.w, "\r\033[K%s", line())
			select {
			case <-t.C:
			case <-done:
				fmt.Fprint(p.w, "\r\033[K")
				return
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

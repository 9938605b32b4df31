package reports

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
)

// ReadPeakRSS returns the peak resident set size of this process, in bytes:
// VmHWM from /proc/self/status. It is Linux only; elsewhere it returns an
// error, and the report's peakRSSBytes stays 0.
func ReadPeakRSS() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("reading peak RSS (needs Linux /proc): %w", err)
	}
	defer f.Close()
	return parsePeakRSS(f)
}

// parsePeakRSS finds the VmHWM line ("VmHWM:\t  123456 kB") of a
// /proc/<pid>/status file.
func parsePeakRSS(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmHWM:"))
		if !ok {
			continue
		}
		fields := bytes.Fields(rest)
		if len(fields) != 2 || string(fields[1]) != "kB" {
			return 0, fmt.Errorf("reading peak RSS: unexpected VmHWM line %q", sc.Text())
		}
		kb, err := strconv.ParseInt(string(fields[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading peak RSS: unexpected VmHWM line %q: %w", sc.Text(), err)
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading peak RSS: %w", err)
	}
	return 0, fmt.Errorf("reading peak RSS: no VmHWM line in /proc/self/status")
}

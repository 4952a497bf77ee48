package client_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/recordio"
)

// benchBridgeEnv makes the test binary serve as the benchmarks' bridge: an ingress that
// receipts every record at once, in another process, so the CPU the benchmarks count
// (their own process's) is the client's alone.
const benchBridgeEnv = "CLIENT_BENCH_BRIDGE"

func serveBenchBridge() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().String())
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex()
		w.Header().Set("Content-Type", "application/recordio")
		w.WriteHeader(http.StatusOK)
		var seq0 uint64
		if s := r.Header.Get("Stream-Sequence"); s != "" {
			seq0, _ = strconv.ParseUint(s, 10, 64)
		}
		named := r.Header.Get("Stream-Name") != ""
		var mu sync.Mutex
		bw := bufio.NewWriterSize(w, 64<<10)
		done := make(chan struct{})
		go func() { // receipts go out in batches, as the bridge's do
			t := time.NewTicker(time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					mu.Lock()
					_ = bw.Flush()
					_ = rc.Flush()
					mu.Unlock()
				}
			}
		}()
		rd := recordio.NewReader(r.Body)
		var buf []byte
		i := uint64(0)
		for ; ; i++ {
			if _, err := rd.Next(); err != nil {
				break
			}
			buf = append(buf[:0], `{"seq":`...)
			buf = strconv.AppendUint(buf, i, 10)
			buf = append(buf, `,"status":200,"topic":"persistent://public/default/bench","messageId":"7:`...)
			buf = strconv.AppendUint(buf, i, 10)
			buf = append(buf, `:-1:-1"`...)
			if named {
				buf = append(buf, `,"sequence":`...)
				buf = strconv.AppendUint(buf, seq0+i, 10)
			}
			buf = append(buf, '}')
			mu.Lock()
			_, _ = bw.Write(recordio.AppendHeader(nil, uint64(len(buf))))
			_, _ = bw.Write(buf)
			mu.Unlock()
		}
		close(done)
		mu.Lock()
		sum := fmt.Sprintf(`{"summary":true,"records":%d,"published":%d,"failed":0,"status":200}`, i, i)
		_, _ = bw.Write(recordio.AppendRecord(nil, []byte(sum)))
		_ = bw.Flush()
		mu.Unlock()
	}))
}

// startBenchBridge runs the test binary as the benchmarks' bridge and returns its URL.
func startBenchBridge(tb testing.TB) string {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchBridgeEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		tb.Fatalf("the benchmarks' bridge did not start: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return "http://" + strings.TrimSpace(line) + "/v1/publish/bench"
}

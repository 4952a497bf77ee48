package recordio_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/recordio-bridge/bridge/recordio"
)

// Reading a stream: each record is its decimal length, a line feed and its bytes.
func ExampleReader() {
	r := recordio.NewReader(strings.NewReader("6\nhello!0\n13\n13 characters"))
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Printf("%q\n", rec)
	}
	fmt.Println("records:", r.Records())
	// Output:
	// "hello!"
	// ""
	// "13 characters"
	// records: 3
}

// A malformed length is an error that says where it is; what came before it was read.
func ExampleReader_badHeader() {
	r := recordio.NewReader(strings.NewReader("2\nok0x10\n"))
	rec, _ := r.Next()
	fmt.Printf("%q\n", rec)
	_, err := r.Next()
	fmt.Println(errors.Is(err, recordio.ErrBadHeader))
	// Output:
	// "ok"
	// true
}

// Writing a stream: Write frames a record, Flush sends what is buffered.
func ExampleWriter() {
	w := recordio.NewWriter(os.Stdout)
	for _, rec := range []string{`{"type":"SUBSCRIBED"}`, `{"type":"HEARTBEAT"}`} {
		if err := w.Write([]byte(rec)); err != nil {
			fmt.Println("error:", err)
			return
		}
	}
	if err := w.Flush(); err != nil {
		fmt.Println("error:", err)
	}
	// Output:
	// 21
	// {"type":"SUBSCRIBED"}20
	// {"type":"HEARTBEAT"}
}

// AppendRecord frames a record into a byte slice without a Writer.
func ExampleAppendRecord() {
	var b []byte
	b = recordio.AppendRecord(b, []byte("a"))
	b = recordio.AppendRecord(b, []byte("bc"))
	fmt.Printf("%q\n", b)
	fmt.Println(bytes.Equal(b, []byte("1\na2\nbc")))
	// Output:
	// "1\na2\nbc"
	// true
}

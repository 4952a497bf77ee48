package egress

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/recordio-bridge/bridge/recordio"
)

// envelope is the JSON form of a record (envelope=json).
type envelope struct {
	MessageID       string            `json:"messageId"`
	Topic           string            `json:"topic"`
	Key             string            `json:"key,omitempty"`
	OrderingKey     string            `json:"orderingKey,omitempty"` // base64 (it is bytes)
	Properties      map[string]string `json:"properties,omitempty"`
	PublishTime     string            `json:"publishTime"`
	EventTime       string            `json:"eventTime,omitempty"`
	RedeliveryCount uint32            `json:"redeliveryCount"`
	// Encrypted and Encryption: a message delivered still encrypted (cryptoFailure: deliver).
	Encrypted     bool            `json:"encrypted,omitempty"`
	Encryption    *Encryption     `json:"encryption,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`       // when the payload is JSON
	PayloadBase64 string          `json:"payloadBase64,omitempty"` // otherwise
}

// convert replaces d's payload by its conversion to the stream's record type.
func (st *stream) convert(ctx context.Context, d *Delivery) error {
	if n := d.Len(); n > maxConvertBytes {
		// Converting reads the record whole and makes a JSON copy several times its
		// size: a bound before anything is read, as for every size from the wire.
		return fmt.Errorf("message %s of %s: %w: %d bytes, more than the %d a stream converts",
			d.ID, d.Topic, ErrTooLargeToConvert, n, maxConvertBytes)
	}
	payload := d.Payload
	if d.Body != nil {
		b, err := io.ReadAll(d.Body)
		if err != nil {
			return fmt.Errorf("message %s: reading its body: %w", d.ID, err)
		}
		// Held whole from here on, so a dead-lettering still has it.
		payload, d.Payload, d.Body, d.Size = b, b, nil, 0
	}
	out, err := st.conv.Convert(ctx, d, payload, st.storedType, st.recordType)
	if err != nil {
		return fmt.Errorf("message %s of %s as %s: %w", d.ID, d.Topic, st.recordType, err)
	}
	d.Payload, d.Body, d.Size = out, nil, 0
	return nil
}

// maxConvertBytes is the largest record a stream converts to another record type
// (protobuf to JSON): it is read whole, decoded and written again as JSON, which a
// protobuf of packed enums can make some 15 times larger.
const maxConvertBytes = 4 << 20

// ErrTooLargeToConvert is wrapped by the conversion error of a record above
// maxConvertBytes: it is set aside for the dead-letter topic, or ends the stream.
var ErrTooLargeToConvert = errors.New("the record is too large to convert")

// flushBytes is what a stream writes between flushes (and acknowledgements) at most,
// besides one record written through.
const flushBytes = 64 << 10

// writeThrough is the payload size from which a record is written to the connection
// directly instead of being copied into the stream's buffer.
const writeThrough = 32 << 10

// appendRecord appends d's record to buf. A large record (and every streamed Body) is
// written through instead: buf first, then the record, straight to the connection; it
// returns buf emptied, and a write error is kept in st.writeErr.
func (st *stream) appendRecord(buf []byte, d *Delivery) []byte {
	if d.Body == nil && len(d.Payload) < writeThrough {
		return st.appendSmall(buf, d)
	}
	if st.writeErr != nil {
		return buf[:0]
	}
	w := deadlineWriter{st}
	if _, err := w.Write(buf); err != nil {
		st.writeErr = err
		return buf[:0]
	}
	buf = buf[:0]
	body := d.Body
	if body == nil {
		body = bytes.NewReader(d.Payload)
	}
	var head []byte
	size := d.Len()
	var tail string
	if st.opts.envelope == "json" {
		// The payload is not looked at as a whole, so it goes as payloadBase64 (whose
		// length is known before it is written) even when it is JSON.
		b, _ := json.Marshal(st.envelope(d))
		head = append(b[:len(b)-1:len(b)-1], `,"payloadBase64":"`...)
		tail = `"}`
		size = int64(len(head)) + int64(base64.StdEncoding.EncodedLen(int(size))) + int64(len(tail))
	}
	var hdr [24]byte
	n, err := w.Write(append(strconv.AppendInt(hdr[:0], size, 10), '\n'))
	if err == nil {
		_, err = w.Write(head)
	}
	if err == nil {
		var copied int64
		if st.opts.envelope == "json" {
			enc := base64.NewEncoder(base64.StdEncoding, w)
			copied, err = io.Copy(enc, body)
			if cerr := enc.Close(); err == nil {
				err = cerr
			}
		} else {
			copied, err = io.Copy(w, body)
		}
		if err == nil && copied != d.Len() {
			err = fmt.Errorf("message %s: its body gave %d of its %d bytes", d.ID, copied, d.Len())
		}
	}
	if err == nil {
		_, err = io.WriteString(w, tail)
	}
	if err != nil {
		// A record cut short cannot be finished: the stream ends here, and the message is
		// not acknowledged (it is redelivered).
		st.writeErr = err
		return buf
	}
	st.direct += int64(n) + size
	return buf
}

func (st *stream) envelope(d *Delivery) envelope {
	e := envelope{MessageID: d.ID, Topic: d.Topic, Key: d.Key, Properties: d.Properties,
		PublishTime: d.PublishTime.UTC().Format(time.RFC3339Nano), RedeliveryCount: d.Redeliveries,
		Encrypted: d.Encryption != nil, Encryption: d.Encryption}
	if !d.EventTime.IsZero() {
		e.EventTime = d.EventTime.UTC().Format(time.RFC3339Nano)
	}
	if len(d.OrderingKey) > 0 {
		e.OrderingKey = base64.StdEncoding.EncodeToString(d.OrderingKey)
	}
	return e
}

func (st *stream) appendSmall(buf []byte, d *Delivery) []byte {
	if st.opts.envelope != "json" {
		return recordio.AppendRecord(buf, d.Payload)
	}
	e := st.envelope(d)
	if d.Encryption == nil && json.Valid(d.Payload) {
		e.Payload = d.Payload
	} else {
		e.PayloadBase64 = base64.StdEncoding.EncodeToString(d.Payload)
	}
	b, _ := json.Marshal(e)
	return recordio.AppendRecord(buf, b)
}

// deadlineWriter writes to the stream's connection, each write within WriteTimeout, so a
// large record may take as long as the client keeps taking its bytes.
type deadlineWriter struct{ st *stream }

func (w deadlineWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	_ = w.st.rc.SetWriteDeadline(time.Now().Add(w.st.limits.WriteTimeout))
	return w.st.c.Response().Write(p)
}

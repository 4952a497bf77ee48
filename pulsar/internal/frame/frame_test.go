package frame

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

func TestChecksumIsCastagnoli(t *testing.T) {
	// The standard check value of CRC-32C.
	if got := Checksum([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("CRC32-C(123456789) = %#x, want 0xe3069283", got)
	}
	if Checksum([]byte("1234"), []byte("56789")) != 0xe3069283 {
		t.Fatal("checksum over pieces differs from the whole")
	}
}

func TestGoldenPing(t *testing.T) {
	got, err := AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	if err != nil {
		t.Fatal(err)
	}
	// totalSize 9, commandSize 5, then type=18 (08 12) and an empty field 18 (92 01 00).
	if want := "00000009" + "00000005" + "0812" + "920100"; hex.EncodeToString(got) != want {
		t.Fatalf("PING frame = %x, want %s", got, want)
	}
}

func TestGoldenSend(t *testing.T) {
	cmd := &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(2)}}
	md := []byte{0x0a, 0x01, 'p'} // producer_name = "p"
	got, err := AppendPayloadCommand(nil, cmd, md, []byte("hi"), 0)
	if err != nil {
		t.Fatal(err)
	}
	// command: type=6 (08 06), field 6 len 4 {producer_id=1 (08 01), sequence_id=2 (10 02)}
	wantCmd := "0806" + "3204" + "0801" + "1002"
	crc := Checksum([]byte{0, 0, 0, 3, 0x0a, 0x01, 'p', 'h', 'i'})
	want := "0000001b" + "00000008" + wantCmd + "0e01" + hex.EncodeToString(binary.BigEndian.AppendUint32(nil, crc)) +
		"00000003" + "0a0170" + "6869"
	if hex.EncodeToString(got) != want {
		t.Fatalf("SEND frame\n got %x\nwant %s", got, want)
	}
	var f Frame
	if err := Decode(got[4:], &f); err != nil {
		t.Fatal(err)
	}
	if f.Cmd.GetSend().GetSequenceId() != 2 || !bytes.Equal(f.Metadata, md) || string(f.Payload) != "hi" || !f.HasPayload {
		t.Fatalf("decoded %+v", f)
	}
}

func TestDecodeBrokerEntryMetadata(t *testing.T) {
	cmd := &pb.BaseCommand{Type: pb.BaseCommand_MESSAGE.Enum(), Message: &pb.CommandMessage{ConsumerId: proto.Uint64(7)}}
	plain, _ := AppendPayloadCommand(nil, cmd, []byte{0x10, 0x05}, []byte("payload"), 0)
	cmdSize := binary.BigEndian.Uint32(plain[4:])
	bem, _ := proto.Marshal(&pb.BrokerEntryMetadata{BrokerTimestamp: proto.Uint64(99), Index: proto.Uint64(3)})
	var withBEM []byte
	withBEM = append(withBEM, plain[4:8+cmdSize]...)
	withBEM = binary.BigEndian.AppendUint16(withBEM, MagicBrokerEntryMetadata)
	withBEM = binary.BigEndian.AppendUint32(withBEM, uint32(len(bem)))
	withBEM = append(withBEM, bem...)
	withBEM = append(withBEM, plain[8+cmdSize:]...)
	var f Frame
	if err := Decode(withBEM, &f); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.BrokerEntryMetadata, bem) || string(f.Payload) != "payload" || f.Cmd.GetMessage().GetConsumerId() != 7 {
		t.Fatalf("decoded %+v", f)
	}
}

func TestDecodeErrors(t *testing.T) {
	good, _ := AppendPayloadCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{}}, []byte{0x10, 1}, []byte("abc"), 0)
	body := good[4:]
	corruptCRC := bytes.Clone(body)
	corruptCRC[len(corruptCRC)-1] ^= 0xff
	noMagic := bytes.Clone(body)
	cmdSize := binary.BigEndian.Uint32(body)
	noMagic[4+cmdSize] = 0
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrCorrupt},
		{"command size beyond frame", []byte{0, 0, 0, 9, 8, 18}, ErrCorrupt},
		{"garbage command", []byte{0, 0, 0, 2, 0xff, 0xff}, ErrCorrupt},
		{"payload without magic", noMagic, ErrCorrupt},
		{"corrupt payload", corruptCRC, ErrChecksum},
		{"truncated after magic", body[:4+cmdSize+5], ErrCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var f Frame
			if err := Decode(c.in, &f); !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
	var f Frame
	_ = Decode(corruptCRC, &f)
	if f.Cmd == nil || f.Cmd.GetType() != pb.BaseCommand_SEND {
		t.Fatal("a checksum error must still return the command")
	}
}

func TestReadSize(t *testing.T) {
	cases := []struct {
		in   string
		max  int
		want int
		err  error
		msg  string
	}{
		{"\x00\x00\x00\x09", 100, 9, nil, ""},
		{"\x00\x00\x01\x00", 100, 0, ErrTooLarge, "256-byte frame"},
		{"\x00\x00\x00\x02", 100, 0, ErrCorrupt, "smaller"},
		{"HTTP", 100, 0, ErrCorrupt, "web port"},
		{"\x16\x03\x01\x00", 100, 0, ErrCorrupt, "pulsar+ssl"},
	}
	for _, c := range cases {
		n, err := ReadSize([4]byte([]byte(c.in)), c.max)
		if n != c.want || !errors.Is(err, c.err) || (c.msg != "" && !bytes.Contains([]byte(err.Error()), []byte(c.msg))) {
			t.Errorf("ReadSize(%q) = %d, %v; want %d, %v (%q)", c.in, n, err, c.want, c.err, c.msg)
		}
	}
}

func TestAppendPayloadRespectsLimit(t *testing.T) {
	_, err := AppendPayloadCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{}}, nil, make([]byte, 100), 50)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	ping, _ := AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_PING.Enum(), Ping: &pb.CommandPing{}})
	send, _ := AppendPayloadCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{}}, []byte{0x10, 1}, []byte("abc"), 0)
	f.Add(ping[4:])
	f.Add(send[4:])
	f.Add([]byte{0, 0, 0, 0, 0x0e, 0x02, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		var fr Frame
		err := Decode(in, &fr)
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrChecksum) {
			t.Fatalf("untyped error %v", err)
		}
		if err == nil && fr.HasPayload {
			// A frame that decodes re-encodes to the same checksummed section.
			re, err := AppendPayloadCommand(nil, fr.Cmd, fr.Metadata, fr.Payload, 0)
			if err != nil {
				t.Fatal(err)
			}
			var again Frame
			if err := Decode(re[4:], &again); err != nil || !bytes.Equal(again.Payload, fr.Payload) || !bytes.Equal(again.Metadata, fr.Metadata) {
				t.Fatalf("re-encoded frame does not decode the same: %v", err)
			}
		}
	})
}

func TestPayloadInPlaceMatchesAppend(t *testing.T) {
	cmd := &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(3), SequenceId: proto.Uint64(99)}}
	md := []byte{0x0a, 0x03, 'a', 'b', 'c', 0x10, 0x63}
	payload := bytes.Repeat([]byte("payload!"), 1000)
	want, err := AppendPayloadCommand(nil, cmd, md, payload, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, headroom := range []int{512, 64, 10} { // 10: too small, falls back
		buf := append(make([]byte, headroom), payload...)
		got, err := PayloadInPlace(buf, headroom, cmd, md, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("headroom %d: in-place frame differs from the appended one", headroom)
		}
		if headroom >= 64 && &got[len(got)-1] != &buf[len(buf)-1] {
			t.Fatalf("headroom %d: the payload was copied", headroom)
		}
	}
	if _, err := PayloadInPlace(append(make([]byte, 512), payload...), 512, cmd, md, 100); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("limit not enforced: %v", err)
	}
}

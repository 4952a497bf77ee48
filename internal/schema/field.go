package schema

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Path is a compiled field path of a protobuf message type: field names (as in the
// .proto) separated by dots, a number after a repeated field choosing its element (the
// first by default), ending at a scalar or enum field. Value reads it out of a record's
// wire bytes without decoding the rest. A Path is immutable and safe for concurrent use.
type Path struct {
	src   string
	steps []step
}

type step struct {
	num      protowire.Number
	index    int  // the element of a repeated field
	repeated bool // index counts; otherwise the last occurrence wins (proto merge semantics)
	fd       protoreflect.FieldDescriptor
}

// CompilePath resolves path against the message type md.
func CompilePath(md protoreflect.MessageDescriptor, path string) (*Path, error) {
	if md == nil {
		return nil, fmt.Errorf("{proto:%s} needs a protobuf_native schema on the route (its message type)", path)
	}
	p := &Path{src: path}
	parts := strings.Split(path, ".")
	cur := md
	for i := 0; i < len(parts); i++ {
		name := parts[i]
		if cur == nil {
			return nil, fmt.Errorf("proto path %q: %s is below a field that is not a message", path, name)
		}
		fd := cur.Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			return nil, fmt.Errorf("proto path %q: %s has no field %q", path, cur.FullName(), name)
		}
		if fd.IsMap() {
			return nil, fmt.Errorf("proto path %q: %s is a map; maps are not supported in paths", path, name)
		}
		if fd.Kind() == protoreflect.GroupKind {
			return nil, fmt.Errorf("proto path %q: %s is a group; groups are not supported in paths", path, name)
		}
		st := step{num: fd.Number(), repeated: fd.IsList(), fd: fd}
		if st.repeated && i+1 < len(parts) {
			if n, err := strconv.Atoi(parts[i+1]); err == nil {
				if n < 0 {
					return nil, fmt.Errorf("proto path %q: a negative index", path)
				}
				st.index = n
				i++
			}
		}
		p.steps = append(p.steps, st)
		cur = fd.Message()
	}
	if last := p.steps[len(p.steps)-1].fd; last.Kind() == protoreflect.MessageKind {
		return nil, fmt.Errorf("proto path %q ends at the message %s; name one of its fields", path, last.Message().FullName())
	}
	return p, nil
}

// String is the path as written.
func (p *Path) String() string { return p.src }

// Value reads the path's field out of a record encoded as the path's message type: the
// field's text (an enum by its name, bytes in base64, numbers in decimal). ok is false
// when the record does not hold the field, or is not well-formed where the path goes.
func (p *Path) Value(data []byte) (v string, ok bool) {
	return p.lookup(data, 0)
}

func (p *Path) lookup(b []byte, i int) (string, bool) {
	st := &p.steps[i]
	last := i == len(p.steps)-1
	want := wireTypeOf(st.fd.Kind())
	seen := 0
	var val string
	found := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", false
		}
		b = b[n:]
		packed := last && st.repeated && typ == protowire.BytesType && want != protowire.BytesType
		if num != st.num || typ != want && !packed {
			// Another field, or this one with a wire type its kind does not have: a
			// decoder keeps it as an unknown field.
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return "", false
			}
			b = b[n:]
			continue
		}
		if !last {
			sub, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", false
			}
			b = b[n:]
			if st.repeated {
				if seen == st.index {
					return p.lookup(sub, i+1)
				}
				seen++
				continue
			}
			if v, ok := p.lookup(sub, i+1); ok {
				val, found = v, true
			}
			continue
		}
		if packed {
			list, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", false
			}
			b = b[n:]
			for len(list) > 0 {
				v, n := scalar(st.fd, want, list)
				if n < 0 {
					return "", false
				}
				list = list[n:]
				if seen == st.index {
					return v, true
				}
				seen++
			}
			continue
		}
		v, n := scalar(st.fd, typ, b)
		if n < 0 {
			return "", false
		}
		b = b[n:]
		if st.repeated {
			if seen == st.index {
				return v, true
			}
			seen++
			continue
		}
		val, found = v, true
	}
	return val, found
}

func isPackable(k protoreflect.Kind) bool {
	switch k {
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind, protoreflect.GroupKind:
		return false
	}
	return true
}

func wireTypeOf(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		return protowire.BytesType
	}
	return protowire.VarintType
}

// scalar decodes one value of fd's kind at the start of b, written with wire type typ
// (the kind's): n is its length, negative when it is cut short.
func scalar(fd protoreflect.FieldDescriptor, typ protowire.Type, b []byte) (string, int) {
	k := fd.Kind()
	switch typ {
	case protowire.VarintType:
		x, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return "", -1
		}
		switch k {
		case protoreflect.BoolKind:
			return strconv.FormatBool(x != 0), n
		case protoreflect.EnumKind:
			if ev := fd.Enum().Values().ByNumber(protoreflect.EnumNumber(int32(x))); ev != nil {
				return string(ev.Name()), n
			}
			return strconv.FormatInt(int64(int32(x)), 10), n // a number the enum does not name
		case protoreflect.Int32Kind:
			return strconv.FormatInt(int64(int32(x)), 10), n
		case protoreflect.Int64Kind:
			return strconv.FormatInt(int64(x), 10), n
		case protoreflect.Sint32Kind:
			return strconv.FormatInt(int64(int32(protowire.DecodeZigZag(x&math.MaxUint32))), 10), n
		case protoreflect.Sint64Kind:
			return strconv.FormatInt(protowire.DecodeZigZag(x), 10), n
		case protoreflect.Uint32Kind:
			return strconv.FormatUint(uint64(uint32(x)), 10), n
		}
		return strconv.FormatUint(x, 10), n
	case protowire.Fixed32Type:
		x, n := protowire.ConsumeFixed32(b)
		if n < 0 {
			return "", -1
		}
		switch k {
		case protoreflect.FloatKind:
			return strconv.FormatFloat(float64(math.Float32frombits(x)), 'g', -1, 32), n
		case protoreflect.Sfixed32Kind:
			return strconv.FormatInt(int64(int32(x)), 10), n
		}
		return strconv.FormatUint(uint64(x), 10), n
	case protowire.Fixed64Type:
		x, n := protowire.ConsumeFixed64(b)
		if n < 0 {
			return "", -1
		}
		switch k {
		case protoreflect.DoubleKind:
			return strconv.FormatFloat(math.Float64frombits(x), 'g', -1, 64), n
		case protoreflect.Sfixed64Kind:
			return strconv.FormatInt(int64(x), 10), n
		}
		return strconv.FormatUint(x, 10), n
	case protowire.BytesType:
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return "", -1
		}
		if k == protoreflect.BytesKind {
			return base64.StdEncoding.EncodeToString(v), n
		}
		return string(v), n
	}
	return "", -1
}

// CheckValue reports a match value the path's field can never have: an enum field's
// value must be one of its names.
func (p *Path) CheckValue(v string) error {
	fd := p.steps[len(p.steps)-1].fd
	if fd.Kind() != protoreflect.EnumKind {
		return nil
	}
	if fd.Enum().Values().ByName(protoreflect.Name(v)) == nil {
		if _, err := strconv.ParseInt(v, 10, 32); err == nil {
			return nil // an enum number the definition does not name
		}
		return fmt.Errorf("%q is not a value of %s", v, fd.Enum().FullName())
	}
	return nil
}

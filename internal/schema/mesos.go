package schema

import (
	_ "embed"
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// mesos.pb is Apache Mesos 1.11.0's own v1 definitions (mesosproto, kept verbatim with
// their license; see mesosproto/README.md), compiled with their imports. Regenerate it
// after changing mesosproto (mesospb: a parser in a module of its own, so it never
// reaches the binary; protoc -I mesosproto --include_imports --descriptor_set_out gives
// the same types):
//go:generate go run -C mesospb . -I ../mesosproto -o ../mesos.pb mesos/v1/scheduler/scheduler.proto mesos/v1/executor/executor.proto mesos/v1/master/master.proto

//go:embed mesos.pb
var mesosSet []byte

// BuiltIn are the message types a protobuf_native schema is meant to name without a
// descriptorSet: the Mesos v1 scheduler, executor and operator API's events and the
// scheduler's calls, complete (every message and field of Mesos 1.11's API they reach).
var BuiltIn = []string{"mesos.v1.scheduler.Event", "mesos.v1.scheduler.Call", "mesos.v1.executor.Event", "mesos.v1.master.Event"}

// builtIn holds the Mesos files; a registry of its own, so nothing linked into the
// binary that registers Mesos types of its own conflicts with them.
var builtIn = mustFiles(mesosSet)

func mustFiles(set []byte) *protoregistry.Files {
	files, err := loadFiles(set)
	if err != nil {
		panic("schema: the built-in Mesos descriptors: " + err.Error())
	}
	return files
}

func loadFiles(set []byte) (*protoregistry.Files, error) {
	var fds descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(set, &fds); err != nil {
		return nil, fmt.Errorf("not a FileDescriptorSet: %w", err)
	}
	files, err := protodesc.NewFiles(&fds)
	if err != nil {
		return nil, err
	}
	return files, nil
}

// findMessage looks a message type up in files.
func findMessage(files *protoregistry.Files, name string) (protoreflect.MessageDescriptor, error) {
	d, err := files.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		var names []string
		files.RangeFiles(func(f protoreflect.FileDescriptor) bool {
			for i := 0; i < f.Messages().Len(); i++ {
				names = append(names, string(f.Messages().Get(i).FullName()))
			}
			return true
		})
		sort.Strings(names)
		if len(names) > 8 {
			names = append(names[:8], "...")
		}
		return nil, fmt.Errorf("no message type %s (top-level types: %v)", name, names)
	}
	md, ok := d.(protoreflect.MessageDescriptor)
	if !ok {
		return nil, fmt.Errorf("%s is not a message type", name)
	}
	return md, nil
}

// Command mesospb compiles the Mesos v1 .proto files the bridge ships
// (internal/schema/mesosproto, Apache Mesos 1.11.0's own) into the FileDescriptorSet
// internal/schema embeds as its built-in types, as protoc --include_imports
// --descriptor_set_out would, without needing protoc. It lives in a module of its own so
// the parser never reaches the bridge's binary.
//
//	go run . -I ../mesosproto -o ../mesos.pb \
//		mesos/v1/scheduler/scheduler.proto mesos/v1/executor/executor.proto mesos/v1/master/master.proto
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

func main() {
	include := flag.String("I", "", "the import path the .proto files are named relative to")
	out := flag.String("o", "", "where the FileDescriptorSet is written")
	flag.Parse()
	if *include == "" || *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: mesospb -I DIR -o FILE FILE.proto...")
		os.Exit(2)
	}
	set, err := Build(*include, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "mesospb:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, set, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "mesospb:", err)
		os.Exit(1)
	}
}

// Compile parses and links files (paths relative to include) and every file they import
// (google/protobuf's own from the compiler's copies).
func Compile(include string, files []string) ([]protoreflect.FileDescriptor, error) {
	c := protocompile.Compiler{
		Resolver:       protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{include}}),
		SourceInfoMode: protocompile.SourceInfoNone,
	}
	linked, err := c.Compile(context.Background(), files...)
	if err != nil {
		return nil, err
	}
	fds := make([]protoreflect.FileDescriptor, len(linked))
	for i, f := range linked {
		fds[i] = f
	}
	return fds, nil
}

// Build is the FileDescriptorSet of files and every file they import, each after its
// imports (protoc's --include_imports order), without source info, serialized
// deterministically so the same sources give the same bytes.
func Build(include string, files []string) ([]byte, error) {
	roots, err := Compile(include, files)
	if err != nil {
		return nil, err
	}
	var set descriptorpb.FileDescriptorSet
	seen := map[string]bool{}
	var add func(f protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		for i := 0; i < f.Imports().Len(); i++ {
			add(f.Imports().Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
	}
	for _, f := range roots {
		add(f)
	}
	if len(set.File) == 0 {
		return nil, errors.New("no files")
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(&set)
}

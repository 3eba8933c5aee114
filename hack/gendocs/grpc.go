package main

import (
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/linker"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// GRPCMarkdown renders the reference of every .proto file under dir (the
// import root, as protoc's -I): per package its services, their RPCs with
// request and response types, and every message and enum with its fields,
// each with its leading comment. The files are parsed and linked by
// protocompile, the same checks protoc makes, so a file protoc would refuse
// fails here too.
func GRPCMarkdown(dir string) (string, error) {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".proto") {
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			names = append(names, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if len(names) == 0 {
		return "", fmt.Errorf("no .proto files under %s", dir)
	}
	slices.Sort(names)
	c := protocompile.Compiler{
		Resolver:       protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{dir}}),
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	files, err := c.Compile(context.Background(), names...)
	if err != nil {
		return "", err
	}
	// The services by port (the store's API first), then by path.
	slices.SortStableFunc(files, func(a, b linker.File) int {
		if c := cmp.Compare(portOf(a), portOf(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.Path(), b.Path())
	})
	// Types documented here are linked; others (well-known types) are named.
	local := map[protoreflect.FullName]bool{}
	for _, f := range files {
		eachType(f.Messages(), f.Enums(), func(d protoreflect.Descriptor) { local[d.FullName()] = true })
	}
	var b strings.Builder
	b.WriteString("# gRPC API reference\n\n")
	b.WriteString("Generated from the `.proto` files under `proto/` by `make generate` (`hack/gendocs`);\n")
	b.WriteString("do not edit. Ports, the metadata headers and the error codes each call answers are in\n")
	b.WriteString("[../interfaces.md](../interfaces.md); the Go client (`client`) is the supported way to\n")
	b.WriteString("call `bellows.kv.v1.KV`.\n\n")
	for _, f := range files {
		for i := 0; i < f.Services().Len(); i++ {
			s := f.Services().Get(i)
			fmt.Fprintf(&b, "- [%s](#%s) (`%s`, port %s)\n", s.FullName(), anchor(string(s.FullName())), f.Path(), portOf(f))
		}
	}
	for _, f := range files {
		writeProtoFile(&b, f, local)
	}
	return b.String(), nil
}

// portOf is the port the file's leading comment names ("port 7400"), or
// "—" when it names none.
func portOf(f protoreflect.FileDescriptor) string {
	c := fileComment(f)
	_, after, ok := strings.Cut(c, "port ")
	if !ok {
		return "—"
	}
	end := strings.IndexFunc(after, func(r rune) bool { return r < '0' || r > '9' })
	if end <= 0 {
		return "—"
	}
	return after[:end]
}

// fileComment is the comment before the syntax statement.
func fileComment(f protoreflect.FileDescriptor) string {
	const syntaxField = 12 // FileDescriptorProto.syntax
	loc := f.SourceLocations().ByPath(protoreflect.SourcePath{syntaxField})
	return loc.LeadingComments
}

func writeProtoFile(b *strings.Builder, f protoreflect.FileDescriptor, local map[protoreflect.FullName]bool) {
	fmt.Fprintf(b, "\n## %s\n\n", f.Package())
	fmt.Fprintf(b, "`proto/%s`", f.Path())
	if c := fileComment(f); c != "" {
		fmt.Fprintf(b, ": %s", text(c))
	}
	b.WriteString("\n")
	for i := 0; i < f.Services().Len(); i++ {
		s := f.Services().Get(i)
		fmt.Fprintf(b, "\n### %s\n\n", s.FullName())
		if c := comment(f, s); c != "" {
			fmt.Fprintf(b, "%s\n\n", text(c))
		}
		b.WriteString("| RPC | request | response | description |\n|---|---|---|---|\n")
		for j := 0; j < s.Methods().Len(); j++ {
			m := s.Methods().Get(j)
			in, out := typeLink(m.Input(), local), typeLink(m.Output(), local)
			if m.IsStreamingClient() {
				in = "stream " + in
			}
			if m.IsStreamingServer() {
				out = "stream " + out
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", code(string(m.Name())), in, out, text(comment(f, m)))
		}
	}
	eachType(f.Messages(), f.Enums(), func(d protoreflect.Descriptor) {
		switch d := d.(type) {
		case protoreflect.MessageDescriptor:
			writeMessage(b, f, d, local)
		case protoreflect.EnumDescriptor:
			writeEnum(b, f, d)
		}
	})
}

// eachType calls fn for every message and enum, nested ones after their
// parent, in declaration order; map entries are not types of their own.
func eachType(msgs protoreflect.MessageDescriptors, enums protoreflect.EnumDescriptors, fn func(protoreflect.Descriptor)) {
	for i := 0; i < enums.Len(); i++ {
		fn(enums.Get(i))
	}
	for i := 0; i < msgs.Len(); i++ {
		m := msgs.Get(i)
		if m.IsMapEntry() {
			continue
		}
		fn(m)
		eachType(m.Messages(), m.Enums(), fn)
	}
}

func writeMessage(b *strings.Builder, f protoreflect.FileDescriptor, m protoreflect.MessageDescriptor, local map[protoreflect.FullName]bool) {
	fmt.Fprintf(b, "\n### %s\n\n", m.FullName())
	if c := comment(f, m); c != "" {
		fmt.Fprintf(b, "%s\n\n", text(c))
	}
	if m.Fields().Len() == 0 {
		b.WriteString("No fields.\n")
		return
	}
	b.WriteString("| field | number | type | description |\n|---|---:|---|---|\n")
	for i := 0; i < m.Fields().Len(); i++ {
		fd := m.Fields().Get(i)
		desc := text(comment(f, fd))
		if o := fd.ContainingOneof(); o != nil && !o.IsSynthetic() {
			desc = strings.TrimSpace("one of " + code(string(o.Name())) + ". " + desc)
		}
		fmt.Fprintf(b, "| %s | %d | %s | %s |\n", code(string(fd.Name())), fd.Number(), fieldType(fd, local), desc)
	}
}

func writeEnum(b *strings.Builder, f protoreflect.FileDescriptor, e protoreflect.EnumDescriptor) {
	fmt.Fprintf(b, "\n### %s\n\n", e.FullName())
	if c := comment(f, e); c != "" {
		fmt.Fprintf(b, "%s\n\n", text(c))
	}
	b.WriteString("| value | number | description |\n|---|---:|---|\n")
	for i := 0; i < e.Values().Len(); i++ {
		v := e.Values().Get(i)
		fmt.Fprintf(b, "| %s | %d | %s |\n", code(string(v.Name())), v.Number(), text(comment(f, v)))
	}
}

// fieldType is how the field is declared: repeated T, optional T, map<K, V>.
func fieldType(fd protoreflect.FieldDescriptor, local map[protoreflect.FullName]bool) string {
	if fd.IsMap() {
		return fmt.Sprintf("map&lt;%s, %s&gt;", scalarOrType(fd.MapKey(), local), scalarOrType(fd.MapValue(), local))
	}
	t := scalarOrType(fd, local)
	switch {
	case fd.Cardinality() == protoreflect.Repeated:
		return "repeated " + t
	case fd.HasOptionalKeyword():
		return "optional " + t
	}
	return t
}

func scalarOrType(fd protoreflect.FieldDescriptor, local map[protoreflect.FullName]bool) string {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return typeLink(fd.Message(), local)
	case protoreflect.EnumKind:
		return typeLink(fd.Enum(), local)
	}
	return fd.Kind().String()
}

// typeLink names a message or enum, linked to its section when it has one.
func typeLink(d protoreflect.Descriptor, local map[protoreflect.FullName]bool) string {
	name := string(d.FullName())
	if !local[d.FullName()] {
		return code(name)
	}
	// Within its own package the short name reads better; the link is exact.
	short := strings.TrimPrefix(name, string(d.ParentFile().Package())+".")
	return fmt.Sprintf("[%s](#%s)", short, anchor(name))
}

// comment is d's leading comment, or its trailing one.
func comment(f protoreflect.FileDescriptor, d protoreflect.Descriptor) string {
	loc := f.SourceLocations().ByDescriptor(d)
	if c := strings.TrimSpace(loc.LeadingComments); c != "" {
		return c
	}
	return strings.TrimSpace(loc.TrailingComments)
}

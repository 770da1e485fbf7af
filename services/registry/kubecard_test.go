package registry

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"sigs.k8s.io/yaml"

	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
)

// fillAll sets every field of m, nested messages included, to a value
// other than its zero, so that a conversion that forgets a field shows.
func fillAll(m protoreflect.Message) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
			m.Mutable(fd).Map().Set(protoreflect.ValueOfString("k").MapKey(), scalar(fd.MapValue(), 1))
		case fd.IsList():
			l := m.Mutable(fd).List()
			for n := range 2 {
				if fd.Kind() == protoreflect.MessageKind {
					e := l.NewElement()
					fillAll(e.Message())
					// Elements must differ where a list is keyed by them.
					setStrings(e.Message(), string(rune('a'+n)))
					l.Append(e)
				} else {
					l.Append(scalar(fd, n+1))
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			fillAll(m.Mutable(fd).Message())
		default:
			m.Set(fd, scalar(fd, 1))
		}
	}
}

// setStrings suffixes every string field of m with s.
func setStrings(m protoreflect.Message, s string) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		if fd := fields.Get(i); fd.Kind() == protoreflect.StringKind && !fd.IsList() && !fd.IsMap() {
			m.Set(fd, protoreflect.ValueOfString(m.Get(fd).String()+s))
		}
	}
}

// scalar is a non-zero value n of fd's kind.
func scalar(fd protoreflect.FieldDescriptor, n int) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fd.TextName() + strings.Repeat("x", n))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{byte(n)})
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(n))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(n))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(n))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(n))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(n))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(n))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(n))
	}
	panic("unhandled kind " + fd.Kind().String())
}

// TestModelEntryCarriesEveryCardField: a card with every field set comes
// back whole from the Kubernetes backend's resource entry, so a field
// added to ModelCard and not to modelEntry fails here rather than
// vanishing on that backend only (its parsers, tasks, adapters and ranks
// once did). Task values without a name in this build travel as numbers.
func TestModelEntryCarriesEveryCardField(t *testing.T) {
	for _, task := range []registryv1.ModelTask{registryv1.ModelTask_MODEL_TASK_GENERATE, registryv1.ModelTask_MODEL_TASK_EMBED, 42} {
		c := &registryv1.ModelCard{}
		fillAll(c.ProtoReflect())
		c.Tasks = []registryv1.ModelTask{task}
		if back := toModelEntry(c).card(c.InstanceId); !proto.Equal(back, c) {
			t.Errorf("card round trip lost fields:\n got  %v\n want %v", back, c)
		}
	}
	for _, bad := range []string{"GENERATE", "Generate", "07", "", "embed "} {
		if _, ok := parseTask(bad); ok {
			t.Errorf("parseTask(%q) accepted", bad)
		}
	}
}

// TestCRDSchemaNamesEveryEntryField: the API server prunes a field its
// schema does not name, silently. Every JSON field of the resource's model
// and endpoint entries must be in both copies of the CRD (the Helm chart's
// and deploy/kubernetes').
func TestCRDSchemaNamesEveryEntryField(t *testing.T) {
	for _, path := range []string{
		filepath.Join("..", "..", "deploy", "kubernetes", "crd.yaml"),
		filepath.Join("..", "..", "deploy", "helm", "switchyard", "crds", "dynamoworkermetadata.yaml"),
	} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var crd map[string]any
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		spec := dig(t, crd, "spec", "versions", 0, "schema", "openAPIV3Schema", "properties", "spec", "properties")
		for _, tc := range []struct {
			name  string
			props any
			typ   reflect.Type
		}{
			{"spec", spec, reflect.TypeFor[workerSpec]()},
			{"models", dig(t, spec, "models", "items", "properties"), reflect.TypeFor[modelEntry]()},
			{"loraAdapters", dig(t, spec, "models", "items", "properties", "loraAdapters", "items", "properties"), reflect.TypeFor[loraEntry]()},
			{"tokenizer", dig(t, spec, "models", "items", "properties", "tokenizer", "items", "properties"), reflect.TypeFor[tokenizerArtifact]()},
			{"endpoints", dig(t, spec, "endpoints", "items", "properties"), reflect.TypeFor[endpointEntry]()},
		} {
			props := tc.props.(map[string]any)
			for i := range tc.typ.NumField() {
				name, _, _ := strings.Cut(tc.typ.Field(i).Tag.Get("json"), ",")
				if _, ok := props[name]; !ok {
					t.Errorf("%s: %s: field %q is not in the schema (the API server would drop it)", path, tc.name, name)
				}
			}
		}
	}
}

// dig follows keys (strings) and indexes (ints) into v.
func dig(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("no %q in %v", k, path)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || len(l) <= k {
				t.Fatalf("no [%d] in %v", k, path)
			}
			v = l[k]
		}
	}
	return v
}

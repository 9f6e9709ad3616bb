package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/go-playground/validator/v10"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

var validate = newValidator()

func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	// Report JSON field names, not Go ones.
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name := strings.SplitN(f.Tag.Get("json"), ",", 2)[0]
		if name == "-" {
			return ""
		}
		return name
	})
	return v
}

// decodeJSON reads one JSON object into v, rejecting unknown fields, trailing
// data and bodies over the limit, then validates it.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	body := http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, limit)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		if err != nil {
			if e := jsonError(err, limit); gateway.ErrorCode(e) == gateway.CodePayloadTooLarge {
				return e
			}
		}
		return gateway.Errorf(gateway.CodeInvalidArgument, "the body must hold a single JSON object")
	}
	return validateStruct(v)
}

func jsonError(err error, limit int64) error {
	var (
		tooLarge *http.MaxBytesError
		syntax   *json.SyntaxError
		typ      *json.UnmarshalTypeError
		ge       *gateway.Error
	)
	switch {
	case errors.As(err, &ge):
		// The body reader's own refusal (a read timeout) stands as it is.
		return ge
	case errors.As(err, &tooLarge):
		return gateway.Errorf(gateway.CodePayloadTooLarge, "the body exceeds %d bytes", limit).WithDetail("limit", limit)
	case errors.Is(err, io.EOF):
		return gateway.Errorf(gateway.CodeInvalidArgument, "the body is empty; a JSON object is required")
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		return gateway.Errorf(gateway.CodeInvalidArgument, "the body is not valid JSON: %v", err)
	case errors.As(err, &typ):
		return gateway.Errorf(gateway.CodeInvalidArgument, "field %q must be %s", typ.Field, typ.Type.String()).WithDetail("field", typ.Field)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return gateway.Errorf(gateway.CodeInvalidArgument, "unknown field %q", field).WithDetail("field", field)
	}
	return gateway.Errorf(gateway.CodeInvalidArgument, "invalid body: %v", err)
}

func validateStruct(v any) error {
	err := validate.Struct(v)
	if err == nil {
		return nil
	}
	var verrs validator.ValidationErrors
	if !errors.As(err, &verrs) || len(verrs) == 0 {
		return gateway.Wrap(gateway.CodeInvalidArgument, err, "invalid request")
	}
	fe := verrs[0]
	// The namespace starts with the request type's own name and holds the
	// Go names of embedded structs, which JSON flattens: the field is what
	// is left.
	segments := strings.Split(fe.Namespace(), ".")[1:]
	embedded := embeddedNames(reflect.TypeOf(v))
	segments = slices.DeleteFunc(segments, func(s string) bool { return embedded[s] })
	field := strings.Join(segments, ".")
	msg := fmt.Sprintf("field %q fails %q", field, fe.Tag())
	if fe.Param() != "" {
		msg = fmt.Sprintf("field %q fails %s=%s", field, fe.Tag(), fe.Param())
	}
	return gateway.Errorf(gateway.CodeInvalidArgument, "%s", msg).WithDetail("field", field)
}

// embeddedNames returns the Go names of the untagged embedded structs of a
// struct type, at any depth.
func embeddedNames(t reflect.Type) map[string]bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	out := map[string]bool{}
	if t.Kind() != reflect.Struct {
		return out
	}
	for i := range t.NumField() {
		f := t.Field(i)
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice || ft.Kind() == reflect.Map {
			ft = ft.Elem()
		}
		if f.Anonymous && f.Tag.Get("json") == "" {
			out[f.Name] = true
		}
		if ft.Kind() == reflect.Struct {
			maps.Copy(out, embeddedNames(ft))
		}
	}
	return out
}

package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
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
	)
	switch {
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
	field := fe.Namespace()
	if i := strings.IndexByte(field, '.'); i >= 0 {
		field = field[i+1:] // drop the request type's own name
	}
	msg := fmt.Sprintf("field %q fails %q", field, fe.Tag())
	if fe.Param() != "" {
		msg = fmt.Sprintf("field %q fails %s=%s", field, fe.Tag(), fe.Param())
	}
	return gateway.Errorf(gateway.CodeInvalidArgument, "%s", msg).WithDetail("field", field)
}

// Package httpjson writes the JSON answers of spillway's HTTP APIs. Every
// error is one body, whatever the API:
//
//	{"error": "what went wrong and where", "field": "the input field, if one", "code": 400}
//
// so that spillwayctl, the web page and curl users read one shape.
package httpjson

import (
	"encoding/json"
	"net/http"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Error is the body of every error answer. Field names the request field
// (or header, or query parameter) at fault, when there is one.
type Error struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
	Code  int    `json:"code"`
}

// Write answers code with v as JSON.
func Write(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// WriteError answers code with an Error body.
func WriteError(w http.ResponseWriter, code int, field, msg string) {
	Write(w, code, Error{Error: msg, Field: field, Code: code})
}

// protoJSON is how every API writes a protobuf answer: the field names of
// the .proto, every field present (zero values too).
var protoJSON = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// WriteProto answers 200 with m as protobuf JSON (protoJSON) and a
// newline; an m that cannot be encoded is a 500 Error body.
func WriteProto(w http.ResponseWriter, m proto.Message) {
	b, err := protoJSON.Marshal(m)
	if err != nil {
		WriteError(w, http.StatusInternalServerError, "", "encoding the response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

package ctl

// RequestBody is requestBody, for the external tests.
var RequestBody = requestBody

package cli

// RequestBody is requestBody, for the external tests.
var RequestBody = requestBody

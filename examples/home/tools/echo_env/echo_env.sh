#!/bin/sh
# echo_env: arguments arrive as environment variables (input: env, output: text).
# Strings are passed as-is (ZAGENT_ARG_NAME=Ada); other types are JSON-encoded
# (ZAGENT_ARG_TIMES=3). ZAGENT_ARGS_JSON holds the whole arguments object.

if [ -z "${ZAGENT_ARG_NAME+set}" ]; then
  echo "ZAGENT_ARG_NAME is not set; pass the \"name\" argument (e.g. {\"name\": \"Ada\"})" >&2
  exit 2
fi

times=${ZAGENT_ARG_TIMES:-1}
case $times in
  '' | *[!0-9]*)
    echo "ZAGENT_ARG_TIMES must be an integer from 1 to 5 (got '$times'); omit \"times\" for 1" >&2
    exit 2 ;;
esac
if [ "$times" -lt 1 ] || [ "$times" -gt 5 ]; then
  echo "ZAGENT_ARG_TIMES must be an integer from 1 to 5 (got $times); omit \"times\" for 1" >&2
  exit 2
fi

i=0
while [ "$i" -lt "$times" ]; do
  printf 'Hello, %s! Workspace: %s\n' "$ZAGENT_ARG_NAME" "${ZAGENT_WORKSPACE:-(not set)}"
  i=$((i + 1))
done
printf 'ZAGENT_ARG_TIMES=%s\n' "${ZAGENT_ARG_TIMES-(not set)}"
printf 'ZAGENT_ARGS_JSON=%s\n' "${ZAGENT_ARGS_JSON-(not set)}"

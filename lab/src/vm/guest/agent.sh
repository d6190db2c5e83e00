# The command channel of a meshd test VM, on the second serial port. The
# host sends one line per command: "ID LIMIT_SECONDS BASE64_SCRIPT"; the
# script runs under `timeout` with its output kept, and the answer is one
# line: "meshvm-done ID EXIT_CODE BASE64_OUTPUT". Base64 keeps any output
# on one line, so nothing the script prints can look like an answer.
while read -r id limit script; do
    echo "$script" | base64 -d >/tmp/meshvm-command
    timeout "$limit" sh /tmp/meshvm-command >/tmp/meshvm-output 2>&1 </dev/null
    code=$?
    echo "meshvm-done $id $code $(base64 -w 0 /tmp/meshvm-output)"
done

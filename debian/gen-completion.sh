#!/bin/sh
# debian/gen-completion.sh SPARKCTL OUT: write the bash completion of sparkctl from the
# program itself: the command list of 'sparkctl --help' (printed from the command table,
# cli/commands.c) and each command's options from 'sparkctl COMMAND --help'. A new
# command or option is completed without editing this file. In a cross build SPARKCTL is
# an aarch64 binary run through qemu-user (binfmt).
set -eu
SPARKCTL=$1
OUT=$2
cmds=$("$SPARKCTL" --help | sed -n '/^Commands:/,/^$/p' | sed -n 's/^  \([a-z][a-z-]*\( [a-z][a-z-]*\)\{0,1\}\)  .*/\1/p')
[ -n "$cmds" ] || { echo "gen-completion: no commands in '$SPARKCTL --help'" >&2; exit 1; }
tops=$(printf '%s\n' "$cmds" | cut -d' ' -f1 | awk '!seen[$0]++' | tr '\n' ' ')
{
	echo "# bash completion for sparkctl, generated from 'sparkctl --help' by debian/gen-completion.sh"
	echo "_sparkctl() {"
	echo '	local cur=${COMP_WORDS[COMP_CWORD]} w1=${COMP_WORDS[1]:-} w2=${COMP_WORDS[2]:-} words=""'
	echo '	if [ "$COMP_CWORD" -eq 1 ]; then'
	echo "		words=\"$tops --socket --output --help\""
	echo '	else'
	echo '		case "$w1" in'
	for top in $tops; do
		subs=$(printf '%s\n' "$cmds" | awk -v t="$top" '$1 == t && NF == 2 {print $2}' | tr '\n' ' ')
		if [ -n "$subs" ]; then
			echo "		$top)"
			echo "			if [ \"\$COMP_CWORD\" -eq 2 ]; then words=\"$subs\"; else case \"\$w2\" in"
			for s in $subs; do
				opts=$("$SPARKCTL" "$top" "$s" --help 2>&1 | grep -o -- '--[a-z][a-z-]*' | sort -u | tr '\n' ' ')
				echo "				$s) words=\"$opts\" ;;"
			done
			echo "			esac; fi ;;"
		else
			opts=$("$SPARKCTL" "$top" --help 2>&1 | grep -o -- '--[a-z][a-z-]*' | sort -u | tr '\n' ' ')
			echo "		$top) words=\"$opts\" ;;"
		fi
	done
	echo '		esac'
	echo '	fi'
	echo '	COMPREPLY=($(compgen -W "$words" -- "$cur"))'
	echo '	case "$cur" in -*|"") ;; *) [ "$COMP_CWORD" -gt 2 ] && COMPREPLY+=($(compgen -f -- "$cur")) ;; esac'
	echo "}"
	echo "complete -F _sparkctl sparkctl"
} > "$OUT"

/* jia_error: format the message, then end the whole job (jia_error_message never returns). */
#include <stdarg.h>
#include <stdio.h>
#include "jia.h"

void jia_error_message(const char *msg);

void jia_error(char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    jia_error_message(buf);
}
